package safefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-dev/strata/internal/safefile"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := safefile.Read(regular, 5); err != nil || string(b) != "12345" {
		t.Fatalf("Read at the limit = %q, %v", b, err)
	}
	if _, err := safefile.Read(regular, 4); !errors.Is(err, safefile.ErrTooLarge) {
		t.Fatalf("Read over the limit = %v, want ErrTooLarge", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		link:        "symlink",
		fifo:        "FIFO",
		dir:         "directory",
		"/dev/zero": "character device",
	} {
		// A FIFO without a writer would block an ordinary open; a
		// device would be opened. Both must be refused at once.
		_, err := safefile.Read(name, 1<<20)
		if !errors.Is(err, safefile.ErrNotRegular) || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%s) = %v, want ErrNotRegular naming %q", name, err, want)
		}
	}
	if _, err := safefile.Read(filepath.Join(dir, "missing"), 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of a missing file = %v, want ErrNotExist", err)
	}
}

func TestReadProc(t *testing.T) {
	// Files of procfs are regular and read through their descriptor.
	b, err := safefile.Read("/proc/self/stat", 1<<20)
	if err != nil || len(b) == 0 {
		t.Fatalf("Read(/proc/self/stat) = %d bytes, %v", len(b), err)
	}
}

func TestReadBeneath(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	for p, data := range map[string]string{filepath.Join(root, "usr/lib/f"): "content", outside: "secret"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := safefile.ReadBeneath(root, "usr/lib/f", 100); err != nil || string(b) != "content" {
		t.Fatalf("ReadBeneath = %q, %v", b, err)
	}
	// Planted links, to the file outside and through a linked directory,
	// and a climb: none is followed.
	if err := os.Symlink(outside, filepath.Join(root, "usr/lib/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(root, "usr/dirlink")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"usr/lib/link", "usr/dirlink/secret", "../" + filepath.Base(filepath.Dir(outside)) + "/secret"} {
		if b, err := safefile.ReadBeneath(root, rel, 100); err == nil {
			t.Errorf("ReadBeneath(%s) read %q", rel, b)
		}
	}
	if _, err := safefile.ReadBeneath(root, "usr/lib/f", 3); !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("ReadBeneath over the limit = %v", err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "usr/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := safefile.ReadBeneath(root, "usr/fifo", 100); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("ReadBeneath of a FIFO = %v", err)
	}
}

// Issue 25: a drifted 5 GiB patch base was read up to its 64 MiB bound
// (284 MB of memory) before it was refused. A regular file over the bound
// is refused from its size, before a byte is read.
func TestReadRefusesLargeFileUnread(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(5 << 30); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err = safefile.Read(p, 64<<20)
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, safefile.ErrTooLarge) || !strings.Contains(err.Error(), "5368709120 bytes") {
		t.Fatalf("a 5 GiB file under a 64 MiB bound: %v, want ErrTooLarge naming its size", err)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing it allocated %d bytes", alloc)
	}
}
