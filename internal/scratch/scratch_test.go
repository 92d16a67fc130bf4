package scratch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A directory in use is never swept; one whose process is gone (its lock
// free) is, once old enough; an edit copy and another prefix never are.
func TestSweep(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	live, err := MkdirTemp("disk")
	if err != nil {
		t.Fatal(err)
	}
	defer live.RemoveAll()
	dead, err := MkdirTemp("upgrade")
	if err != nil {
		t.Fatal(err)
	}
	dead.Release() // as a killed process's lock is
	if err := os.WriteFile(filepath.Join(dead.Path, "copy.squashfs"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	edit := filepath.Join(os.TempDir(), "strata-edit-123")
	legacy := filepath.Join(os.TempDir(), "strata-disk-456") // no lock file
	other := filepath.Join(os.TempDir(), "not-strata-disk-1")
	for _, d := range []string{edit, legacy, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if removed, err := Sweep(time.Hour); err != nil || len(removed) != 0 {
		t.Fatalf("a sweep of young directories removed %v (%v)", removed, err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, d := range []string{live.Path, dead.Path, edit, legacy, other} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := Sweep(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(removed, " ") != strings.Join(sortedOf(dead.Path, legacy), " ") {
		t.Errorf("removed %v, want %s and %s", removed, dead.Path, legacy)
	}
	for _, d := range []string{live.Path, edit, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// The lock is the process's: a child that inherits nothing keeps the
// directory in use only while its creator lives.
func TestHeldAcrossProcesses(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	d, err := MkdirTemp("sandbox")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("flock", "-n", "-x", filepath.Join(d.Path, lockName), "true").CombinedOutput()
	if err == nil {
		t.Fatalf("another process took the lock of a directory in use: %s", out)
	}
	d.Release()
	if out, err := exec.Command("flock", "-n", "-x", filepath.Join(d.Path, lockName), "true").CombinedOutput(); err != nil {
		t.Fatalf("the lock of a released directory: %v %s", err, out)
	}
}

func sortedOf(a, b string) []string {
	if a > b {
		a, b = b, a
	}
	return []string{a, b}
}
