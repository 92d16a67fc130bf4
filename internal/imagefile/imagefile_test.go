package imagefile_test

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/strata-dev/strata/internal/imagefile"
)

func fillTar(files map[string]string) func(io.Writer) error {
	return func(w io.Writer) error {
		tw := tar.NewWriter(w)
		if err := tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, Format: tar.FormatPAX}); err != nil {
			return err
		}
		for _, name := range []string{"etc/a", "etc/b"} {
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[name])), Format: tar.FormatPAX}); err != nil {
				return err
			}
			if _, err := io.WriteString(tw, files[name]); err != nil {
				return err
			}
		}
		return tw.Close()
	}
}

// TestTarRoundTrip: an image written in the tar form is recognised only
// once registered, then streams back byte for byte and gives one file.
func TestTarRoundTrip(t *testing.T) {
	ctx := context.Background()
	img := filepath.Join(t.TempDir(), "x.img")
	files := map[string]string{"etc/a": "alpha\n", "etc/b": "beta\n"}
	if err := imagefile.Tar.Write(ctx, img, imagefile.WriteOptions{}, fillTar(files)); err != nil {
		t.Fatal(err)
	}
	if _, err := imagefile.Open(ctx, img); !errors.Is(err, imagefile.ErrFormat) {
		t.Fatalf("unregistered tar image opened: %v", err)
	}
	imagefile.Register(imagefile.Tar)
	f, err := imagefile.Detect(img)
	if err != nil || f.Name() != "tar" {
		t.Fatalf("Detect = %v, %v", f, err)
	}
	rc, err := imagefile.Open(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 || names[2] != "etc/b" {
		t.Errorf("streamed %v", names)
	}
	b, err := imagefile.Cat(ctx, img, "etc/b")
	if err != nil || string(b) != "beta\n" {
		t.Errorf("Cat etc/b = %q, %v", b, err)
	}
	if _, err := imagefile.Cat(ctx, img, "etc"); err == nil {
		t.Error("Cat of a directory succeeded")
	}
	if _, err := imagefile.Cat(ctx, img, "etc/c"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Cat of a missing file: %v", err)
	}
	got := map[int]string{}
	err = imagefile.CatFiles(ctx, img, []imagefile.File{{Rel: "etc/b", Size: 5}, {Rel: "etc/a", Size: 6}, {Rel: "etc/b", Size: 5}}, func(i int, b []byte) error {
		got[i] = string(b)
		return nil
	})
	if err != nil || got[0] != "beta\n" || got[1] != "alpha\n" || got[2] != "beta\n" {
		t.Errorf("CatFiles = %v, %v", got, err)
	}
	for _, bad := range [][]imagefile.File{{{Rel: "etc/c", Size: 1}}, {{Rel: "etc/a", Size: 5}}, {{Rel: "etc", Size: 0}}} {
		if err := imagefile.CatFiles(ctx, img, bad, func(int, []byte) error { return nil }); err == nil {
			t.Errorf("CatFiles(%v) succeeded", bad)
		}
	}
}

// TestWriteFailureLeavesNothing: a failing fill leaves no image and no
// temporary file; a cancelled one neither.
func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "x.img")
	boom := errors.New("boom")
	if err := imagefile.Tar.Write(context.Background(), img, imagefile.WriteOptions{}, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Write = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := imagefile.Tar.Write(ctx, img, imagefile.WriteOptions{}, fillTar(nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Write = %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestDetectRefuses: a file in no known format and a FIFO are refused by
// name, without blocking on the FIFO.
func TestDetectRefuses(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("not an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := imagefile.Detect(junk); !errors.Is(err, imagefile.ErrFormat) {
		t.Errorf("junk: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := imagefile.Detect(fifo); !errors.Is(err, imagefile.ErrFormat) {
		t.Errorf("fifo: %v", err)
	}
}
