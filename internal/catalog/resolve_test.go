package catalog

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
)

func link(target string) *fstest.MapFile {
	return &fstest.MapFile{Mode: fs.ModeSymlink, Data: []byte(target)}
}

func file(data string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(data), Mode: 0o644}
}

func TestResolve(t *testing.T) {
	fsys := fstest.MapFS{
		"usr/bin/dash":   file("dash"),
		"usr/bin/sh":     link("dash"),
		"bin":            link("usr/bin"),
		"usr/bin/abs":    link("/usr/bin/sh"),
		"usr/bin/up":     link("../../../../../usr/bin/dash"),
		"usr/bin/escape": link("/../../etc/passwd"),
		"usr/bin/loop1":  link("loop2"),
		"usr/bin/loop2":  link("/usr/bin/loop1"),
		"usr/bin/dangle": link("nowhere"),
		"usr/bin/sub":    link("dash/x"),
		"etc/passwd":     file("root"),
	}
	tests := []struct {
		name      string
		in        string
		wantFinal string
		wantLinks []string
		wantErr   error
	}{
		{"regular", "usr/bin/dash", "usr/bin/dash", nil, nil},
		{"relative link", "usr/bin/sh", "usr/bin/dash", []string{"usr/bin/sh"}, nil},
		{"directory link", "bin/dash", "usr/bin/dash", nil, nil},
		{"chain through directory link", "bin/abs", "usr/bin/dash", []string{"usr/bin/abs", "usr/bin/sh"}, nil},
		{"dot-dot clamps at root", "usr/bin/up", "usr/bin/dash", []string{"usr/bin/up"}, nil},
		{"absolute escape clamps at root", "usr/bin/escape", "etc/passwd", []string{"usr/bin/escape"}, nil},
		{"lexical dot-dot", "../../usr/./bin/../bin/dash", "usr/bin/dash", nil, nil},
		{"leading slash", "/usr/bin/dash", "usr/bin/dash", nil, nil},
		{"loop", "usr/bin/loop1", "", nil, ErrSymlinkLoop},
		{"dangling", "usr/bin/dangle", "", nil, fs.ErrNotExist},
		{"missing", "usr/sbin/none", "", nil, fs.ErrNotExist},
		{"file used as directory", "usr/bin/sub", "", nil, fs.ErrNotExist},
		{"root", "", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			final, links, err := resolve(fsys, tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("resolve(%q) error = %v, want %v", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve(%q): %v", tt.in, err)
			}
			if final != tt.wantFinal || !slices.Equal(links, tt.wantLinks) {
				t.Errorf("resolve(%q) = %q, %q; want %q, %q", tt.in, final, links, tt.wantFinal, tt.wantLinks)
			}
		})
	}
}

// TestResolveDirFSStaysInTree checks that absolute links inside an
// os.DirFS tree are resolved against the tree, not the host.
func TestResolveDirFSStaysInTree(t *testing.T) {
	root := t.TempDir()
	mkdir(t, filepath.Join(root, "usr/bin"))
	mkdir(t, filepath.Join(root, "etc"))
	if err := os.Symlink("/etc/hostname", filepath.Join(root, "usr/bin/host")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../etc", filepath.Join(root, "usr/bin/etcdir")); err != nil {
		t.Fatal(err)
	}
	fsys := os.DirFS(root)
	for _, name := range []string{"usr/bin/host", "usr/bin/etcdir/hostname"} {
		if final, _, err := resolve(fsys, name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("resolve(%q) = %q, %v; want fs.ErrNotExist (the host file must not be reached)", name, final, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("tree"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"usr/bin/host", "usr/bin/etcdir/hostname"} {
		if final, _, err := resolve(fsys, name); err != nil || final != "etc/hostname" {
			t.Errorf("resolve(%q) = %q, %v; want etc/hostname", name, final, err)
		}
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
