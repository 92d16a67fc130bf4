package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MkdirParents creates the missing parent directories of path (mode
// 0755) and returns a function that removes the ones it created, deepest
// first, when they are still empty: a command that fails after this
// leaves no trace of them.
func MkdirParents(path string) (undo func(), err error) {
	var created []string
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return func() {}, fmt.Errorf("creating the parents of %s: %w", path, err)
		}
		created = append(created, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	undo = func() {
		for _, d := range created {
			_ = os.Remove(d) // only when empty
		}
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := os.Mkdir(created[i], 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			undo()
			return func() {}, fmt.Errorf("creating the parents of %s: %w", path, err)
		}
	}
	return undo, nil
}
