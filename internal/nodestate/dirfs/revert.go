package dirfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// checkSaved checks every object the undo data of orig holds (see
// checkUndo).
func checkSaved(orig journal, undo string) error {
	old := filepath.Join(undo, "old")
	if fi, err := os.Lstat(old); err == nil && !fi.IsDir() {
		return fmt.Errorf("undo data %s is not a directory (%s): %w", old, safefile.TypeName(fi.Mode()), nodestate.ErrBadState)
	}
	for i, o := range orig.Ops {
		saved := filepath.Join(old, strconv.Itoa(i))
		if _, err := os.Lstat(saved); err != nil || o.Kind == opMeta {
			continue
		}
		if err := checkUndo(saved, o.Path, o.Old); err != nil {
			return err
		}
	}
	return nil
}

// inverseOps builds the ops that undo orig, staging copies of the objects
// orig displaced (the undo data stays intact until the rollback commits;
// checkSaved has checked it).
func inverseOps(t *txn, orig journal, undo string) ([]op, error) {
	var ops []op
	for i := len(orig.Ops) - 1; i >= 0; i-- {
		o := orig.Ops[i]
		saved := filepath.Join(undo, "old", strconv.Itoa(i))
		_, err := os.Lstat(saved)
		hasSaved := err == nil
		cur, exists, err := current(t.n, o.Path)
		if err != nil {
			return nil, err
		}
		switch {
		case o.Kind == opMeta:
			ops = append(ops, op{Kind: opMeta, Path: o.Path, Entry: o.Old, Existed: true, Old: o.Entry})
		case hasSaved:
			j := len(ops)
			if err := copyTree(saved, t.newPath(j)); err != nil {
				return nil, fmt.Errorf("staging undo data for %s: %w", o.Path, err)
			}
			ops = append(ops, op{Kind: opReplace, Path: o.Path, Entry: o.Old, Existed: exists, Old: cur})
		case exists:
			ops = append(ops, op{Kind: opDelete, Path: o.Path, Existed: true, Old: cur})
		}
	}
	return ops, nil
}

// copyTree copies the object at src (a file, symlink or whole directory)
// to dst with owners and modes.
func copyTree(src, dst string) error {
	top, err := tree.StatEntry(src, ".")
	if err != nil {
		return err
	}
	if err := copyOne(src, dst, top); err != nil {
		return err
	}
	if top.Type != manifests.TypeDir {
		return nil
	}
	entries, err := tree.Scan(src, nil)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := copyOne(filepath.Join(src, e.Path), filepath.Join(dst, e.Path), e); err != nil {
			return err
		}
	}
	return nil
}

// copyOne copies the object at src (a file, or a link or directory made
// anew) to dst as entry e.
func copyOne(src, dst string, e manifests.Entry) error {
	if e.Type != manifests.TypeFile {
		return tree.Create(dst, e, nil)
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return tree.Create(dst, e, f)
}
