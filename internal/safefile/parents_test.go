package safefile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/safefile"
)

func TestMkdirParents(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "a", "b", "node.img")
	undo, err := safefile.MkdirParents(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(base, "a", "b")); err != nil || !fi.IsDir() {
		t.Fatalf("parents not made: %v", err)
	}
	undo()
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Fatalf("undo left %s: %v", filepath.Join(base, "a"), err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Fatalf("undo removed a directory it did not make: %v", err)
	}
	// A parent that is a file is an error naming the path.
	file := filepath.Join(base, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := safefile.MkdirParents(filepath.Join(file, "x", "y")); err == nil {
		t.Fatal("parents under a file were made")
	}
	// Undo keeps a parent that something else filled meanwhile.
	undo, err = safefile.MkdirParents(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "a", "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	undo()
	if _, err := os.Stat(filepath.Join(base, "a", "keep")); err != nil {
		t.Fatalf("undo removed a filled directory: %v", err)
	}
}
