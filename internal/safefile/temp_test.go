package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A temporary directory or file goes to the first offered directory
// reachable without a symlink: a link at the directory or on the way to
// it is skipped, never written through.
func TestTempRefusesLinks(t *testing.T) {
	base := t.TempDir()
	outside := t.TempDir()
	root := filepath.Join(base, "node")
	if err := os.MkdirAll(filepath.Join(root, "var"), 0o755); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(root, "var/tmp")
	if err := os.Symlink(outside, linked); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(base, "via")); err != nil {
		t.Fatal(err)
	}
	fallback := filepath.Join(base, "host-tmp")
	if err := os.Mkdir(fallback, 0o755); err != nil {
		t.Fatal(err)
	}
	dirs := []string{linked, filepath.Join(base, "via/var"), fallback}
	d, err := MkdirTemp(dirs, "strata-spool-")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(d) != fallback || !strings.HasPrefix(filepath.Base(d), "strata-spool-") {
		t.Errorf("MkdirTemp made %s, want it in %s", d, fallback)
	}
	if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v %v", d, fi, err)
	}
	f, err := CreateTemp(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("spooled"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("the link's target was written: %v", ents)
	}
	if ents, _ := os.ReadDir(fallback); len(ents) != 1 {
		t.Errorf("%s holds %v, want only the directory (the file has no name)", fallback, ents)
	}
	if _, err := MkdirTemp(dirs[:2], "x-"); !errors.Is(err, ErrNoTempDir) || !strings.Contains(err.Error(), "var/tmp") {
		t.Errorf("only linked directories: %v, want ErrNoTempDir naming them", err)
	}
	if _, err := CreateTemp([]string{"relative"}); !errors.Is(err, ErrNoTempDir) {
		t.Errorf("a relative directory: %v", err)
	}
}

func TestMkdirAllRefusesLinks(t *testing.T) {
	base := t.TempDir()
	outside := t.TempDir()
	if err := MkdirAll(filepath.Join(base, "run/strata/staging"), 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(base, "run/strata/staging")); err != nil || !fi.IsDir() {
		t.Fatalf("not made: %v", err)
	}
	if err := os.Symlink(outside, filepath.Join(base, "run/link")); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(base, "run/link/strata"), 0o755); err == nil || !strings.Contains(err.Error(), "run/link") {
		t.Errorf("through a link: %v, want a refusal naming it", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("made through the link: %v", ents)
	}
}
