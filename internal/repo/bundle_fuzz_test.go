package repo_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
)

func tarOf(f *testing.F, members map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range members {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			f.Fatal(err)
		}
		if _, err := tw.Write([]byte(data)); err != nil {
			f.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzOpenBundle opens arbitrary bytes as a bundle (make fuzz runs it):
// it never panics, and what opens reads back within its members' sizes.
func FuzzOpenBundle(f *testing.F) {
	f.Add(tarOf(f, map[string]string{"bundle.json": `{"line":"demo","from":"1.0.0","to":"1.0.1"}`, "index.json": "{}", "overlays/a": "x"}))
	f.Add(tarOf(f, map[string]string{"bundle.json": `{"line":"demo","to":"1.0.1","to":"9.9.9"}`}))
	f.Add(tarOf(f, map[string]string{"../bundle.json": "{}"}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "b.tar")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		bs, err := repo.OpenBundle(context.Background(), p)
		if err != nil {
			return
		}
		defer bs.Close()
		for _, name := range []string{"bundle.json", "index.json", "overlays/a", "../x"} {
			rc, size, err := bs.Open(context.Background(), name)
			if err != nil {
				continue
			}
			n, _ := io.Copy(io.Discard, rc)
			rc.Close()
			if n > size {
				t.Fatalf("%s: read %d bytes of a %d-byte member", name, n, size)
			}
		}
	})
}
