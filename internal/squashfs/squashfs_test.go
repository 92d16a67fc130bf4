package squashfs_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/internal/testenv"
)

func writeTar(w io.Writer, files map[string]string) error {
	tw := tar.NewWriter(w)
	for _, name := range []string{"etc/", "etc/a", "etc/b"} {
		h := &tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeDir, Uid: 0, Gid: 0}
		if !strings.HasSuffix(name, "/") {
			h = &tar.Header{Name: name, Mode: 04755, Typeflag: tar.TypeReg, Size: int64(len(files[name])), Uid: 7, Gid: 8}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, files[name]); err != nil {
			return err
		}
	}
	return tw.Close()
}

func TestWriteOpenCatRoundTrip(t *testing.T) {
	testenv.RequireTools(t, testenv.Squashfs)
	ctx := context.Background()
	img := filepath.Join(t.TempDir(), "x.squashfs")
	files := map[string]string{"etc/a": "alpha\n", "etc/b": "beta\n"}
	err := squashfs.Write(ctx, img, squashfs.WriteOptions{Epoch: 1700000000}, func(w io.Writer) error { return writeTar(w, files) })
	if err != nil {
		t.Fatal(err)
	}
	r, err := squashfs.Open(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(r)
	seen := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[strings.TrimSuffix(h.Name, "/")] = h
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	a := seen["etc/a"]
	if a == nil || a.Uid != 7 || a.Gid != 8 || a.Mode&07777 != 04755 || a.ModTime.Unix() != 1700000000 {
		t.Fatalf("etc/a read back as %+v, want uid 7 gid 8 mode 04755 mtime 1700000000", a)
	}
	b, err := squashfs.Cat(ctx, img, "etc/b")
	if err != nil || string(b) != "beta\n" {
		t.Fatalf("Cat etc/b = %q, %v", b, err)
	}
	if _, err := squashfs.Cat(ctx, img, "etc/missing"); !errors.Is(err, squashfs.ErrTool) {
		t.Fatalf("Cat of a missing file: %v, want ErrTool", err)
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	testenv.RequireTools(t, testenv.Squashfs)
	dir := t.TempDir()
	img := filepath.Join(dir, "x.squashfs")
	boom := errors.New("producer failed")
	err := squashfs.Write(context.Background(), img, squashfs.WriteOptions{}, func(w io.Writer) error {
		_, _ = io.WriteString(w, "not a tar stream at all, but truncated")
		return boom
	})
	if err == nil {
		t.Fatal("Write succeeded on a failing producer")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("%d files left behind after a failed write", len(ents))
	}
	err = squashfs.Write(context.Background(), img, squashfs.WriteOptions{Compressor: "no-such-compressor"}, func(w io.Writer) error { return writeTar(w, nil) })
	if !errors.Is(err, squashfs.ErrTool) || !strings.Contains(err.Error(), "mksquashfs") {
		t.Fatalf("bad compressor: %v, want ErrTool naming mksquashfs", err)
	}
}

// CatFiles reads many files in one process, in the order asked, whatever
// their names: shell-pattern characters, a leading "-", bytes that are
// not UTF-8 are matched literally.
func TestCatFiles(t *testing.T) {
	testenv.RequireTools(t, testenv.Squashfs)
	ctx := context.Background()
	names := []string{"d/x*", "d/xy", "d/-n", "d/[ab]", "d/a", "d/sp ace", "d/\xff\xfe", "d/?(x)", "d/\\", "d/.hidden", "d/empty"}
	files := map[string]string{}
	for i, n := range names {
		files[n] = strings.Repeat(string(rune('A'+i)), i*3)
	}
	img := filepath.Join(t.TempDir(), "x.squashfs")
	err := squashfs.Write(ctx, img, squashfs.WriteOptions{Epoch: 1700000000}, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		if err := tw.WriteHeader(&tar.Header{Name: "d/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
		for _, n := range names {
			if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(files[n]))}); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, files[n]); err != nil {
				return err
			}
		}
		return tw.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Asked in reverse, and one twice.
	var want []squashfs.File
	for i := len(names) - 1; i >= 0; i-- {
		want = append(want, squashfs.File{Rel: names[i], Size: int64(len(files[names[i]]))})
	}
	want = append(want, want[2])
	got := make([]string, len(want))
	if err := squashfs.CatFiles(ctx, img, want, func(i int, b []byte) error { got[i] = string(b); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, f := range want {
		if got[i] != files[f.Rel] {
			t.Errorf("%q read as %q, want %q", f.Rel, got[i], files[f.Rel])
		}
	}
	// A missing file, a size too large, one too small (more output than
	// asked for) all end in an error.
	for _, bad := range [][]squashfs.File{
		{{Rel: "d/xy", Size: 3}, {Rel: "d/missing", Size: 1}},
		{{Rel: "d/xy", Size: 4}},
		{{Rel: "d/xy", Size: 2}},
		{{Rel: "d", Size: 0}},
	} {
		if err := squashfs.CatFiles(ctx, img, bad, func(int, []byte) error { return nil }); err == nil {
			t.Errorf("CatFiles(%v) succeeded", bad)
		}
	}
}
