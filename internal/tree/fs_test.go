package tree_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

func resolveState() tree.State {
	return tree.NewState([]manifests.Entry{
		dirE("etc"),
		fileE("etc/passwd", "root\n"),
		linkE("etc/abs", "/usr/lib"),
		linkE("etc/rel", "../usr/lib"),
		linkE("etc/climb", "../../../../usr"),
		linkE("etc/chain", "abs"),
		linkE("etc/self", "self"),
		linkE("etc/a", "b"),
		linkE("etc/b", "a"),
		linkE("etc/dangling", "nowhere"),
		linkE("etc/dot", "."),
		linkE("etc/up", ".."),
		dirE("usr"),
		dirE("usr/lib"),
		fileE("usr/lib/libc.so", "elf"),
		linkE("usr/lib/root", "/"),
	})
}

func TestResolve(t *testing.T) {
	s := resolveState()
	tests := []struct {
		name, want string
	}{
		{".", "."},
		{"etc", "etc"},
		{"etc/passwd", "etc/passwd"},
		{"etc/abs", "usr/lib"},
		{"etc/abs/libc.so", "usr/lib/libc.so"},
		{"etc/rel/libc.so", "usr/lib/libc.so"},
		{"etc/chain/libc.so", "usr/lib/libc.so"},
		// ".." stops at the root, as in a chroot.
		{"etc/climb/lib", "usr/lib"},
		{"etc/climb", "usr"},
		{"../../etc/passwd", "etc/passwd"},
		{"etc/../../usr", "usr"},
		// An absolute target restarts at the root.
		{"usr/lib/root/etc/passwd", "etc/passwd"},
		{"usr/lib/root", "."},
		{"etc/dot/passwd", "etc/passwd"},
		{"etc/up/usr/lib", "usr/lib"},
		{"etc/up", "."},
	}
	for _, tt := range tests {
		got, err := tree.Resolve(s, tt.name)
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	for _, loop := range []string{"etc/self", "etc/a", "etc/b/x"} {
		if _, err := tree.Resolve(s, loop); err == nil || !strings.Contains(err.Error(), "too many levels") {
			t.Errorf("Resolve(%q) = %v, want a symlink loop error", loop, err)
		}
	}
	for _, missing := range []string{"etc/dangling", "nope", "etc/passwd2", "etc/abs/nope"} {
		if _, err := tree.Resolve(s, missing); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Resolve(%q) = %v, want fs.ErrNotExist", missing, err)
		}
	}
}

func TestFSOpenFollowsLinks(t *testing.T) {
	s := resolveState()
	fsys := tree.NewFS(s, memOpener(map[string]string{"etc/passwd": "root\n", "usr/lib/libc.so": "elf"}))
	b, err := fs.ReadFile(fsys, "usr/lib/root/etc/passwd")
	if err != nil || string(b) != "root\n" {
		t.Fatalf("ReadFile through links = %q, %v", b, err)
	}
	b, err = fs.ReadFile(fsys, "etc/climb/lib/libc.so")
	if err != nil || string(b) != "elf" {
		t.Fatalf("ReadFile through climbing link = %q, %v", b, err)
	}
	target, err := fsys.ReadLink("etc/rel")
	if err != nil || target != "../usr/lib" {
		t.Fatalf("ReadLink = %q, %v", target, err)
	}
	if _, err := fsys.ReadLink("etc/passwd"); err == nil {
		t.Fatal("ReadLink of a file succeeded")
	}
	fi, err := fsys.Lstat("etc/abs")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("Lstat(etc/abs) = %v, %v", fi, err)
	}
	if _, err := fsys.Open("/etc/passwd"); !errors.Is(err, fs.ErrInvalid) {
		t.Fatalf("Open of an absolute name = %v, want fs.ErrInvalid", err)
	}
	if _, err := fsys.Open("etc/self"); err == nil {
		t.Fatal("Open of a symlink loop succeeded")
	}
	if _, err := fsys.Open("etc/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing path = %v, want fs.ErrNotExist", err)
	}
	// An Opener failure surfaces from Open.
	broken := tree.NewFS(s, func(manifests.Entry) (io.ReadCloser, error) { return nil, errors.New("boom") })
	if _, err := broken.Open("etc/passwd"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Open with a failing opener = %v", err)
	}
}

func TestFSReadLinkFSAndTestFS(t *testing.T) {
	var fsys fs.FS = tree.NewFS(tree.State{}, nil)
	if _, ok := fsys.(fs.ReadLinkFS); !ok {
		t.Fatal("*tree.FS does not implement fs.ReadLinkFS")
	}
	contents := map[string]string{
		"etc/hostname":     "node\n",
		"etc/app/app.conf": "port 80\n",
		"usr/bin/app":      "#!/bin/sh\n",
	}
	entries := []manifests.Entry{
		dirE("etc"),
		dirE("etc/app"),
		fileE("etc/app/app.conf", contents["etc/app/app.conf"]),
		fileE("etc/hostname", contents["etc/hostname"]),
		linkE("etc/app/current", "app.conf"),
		linkE("etc/bin", "/usr/bin"),
		dirE("usr"),
		dirE("usr/bin"),
		{Path: "usr/bin/app", Type: manifests.TypeFile, Mode: 04755, Size: int64(len(contents["usr/bin/app"])), SHA256: sum(contents["usr/bin/app"])},
		{Path: "var", Type: manifests.TypeDir, Mode: 01777},
	}
	fsys = tree.NewFS(tree.NewState(entries), memOpener(contents))
	if err := fstest.TestFS(fsys, "etc/hostname", "etc/app/app.conf", "etc/app/current", "etc/bin", "usr/bin/app", "var"); err != nil {
		t.Fatal(err)
	}
}

// Content from a host file is read where it lies, up to the entry's
// size, and closing the fs.File closes the host file.
func TestFSOpenHostFileInPlace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, []byte("0123456789 and what was appended since the scan"), 0o644); err != nil {
		t.Fatal(err)
	}
	var opened *os.File
	s := tree.NewState([]manifests.Entry{{Path: "f", Type: manifests.TypeFile, Mode: 0o644, Size: 10}})
	fsys := tree.NewFS(s, func(manifests.Entry) (io.ReadCloser, error) {
		f, err := os.Open(p)
		opened = f
		return f, err
	})
	b, err := fs.ReadFile(fsys, "f")
	if err != nil || string(b) != "0123456789" {
		t.Fatalf("ReadFile = %q, %v; want the entry's 10 bytes", b, err)
	}
	if _, err := opened.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the host file is still open after Close: %v", err)
	}
	f, err := fsys.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4)
	if n, err := f.(io.ReaderAt).ReadAt(buf, 6); n != 4 || string(buf) != "6789" {
		t.Errorf("ReadAt(6) = %q, %d, %v", buf, n, err)
	}
}
