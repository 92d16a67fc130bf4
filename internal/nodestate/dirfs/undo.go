package dirfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// checkUndo checks the undo object saved, what an apply displaced from
// tree path p (displaced: the entry its journal recorded), before a
// rollback copies it back. Undo data is node state, which may have been
// planted, so nothing in it is followed or opened blindly: the object must
// be of the type the apply recorded (a link where a file was is refused),
// and nothing at or below it may be a FIFO, a device or a socket, or a
// link whose target climbs out of the root. What it holds is otherwise
// restored as the node had it, a local change included (the apply
// displaced it: a rollback puts it back, and verify-sequence --files
// reports it as drift, as before the apply). A refusal is ErrBadState,
// found before anything is restored.
func checkUndo(saved, p string, displaced manifests.Entry) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("undo data for /%s (%s): %s: %w", p, saved, fmt.Sprintf(format, a...), nodestate.ErrBadState)
	}
	return filepath.WalkDir(saved, func(host string, d fs.DirEntry, err error) error {
		if err != nil {
			return bad("%v", err)
		}
		rel, err := filepath.Rel(saved, host)
		if err != nil {
			return bad("%v", err)
		}
		path := p
		if rel != "." {
			path = p + "/" + filepath.ToSlash(rel)
		}
		fi, err := os.Lstat(host)
		if err != nil {
			return bad("%v", err)
		}
		var typ manifests.EntryType
		switch {
		case fi.Mode().IsRegular():
			typ = manifests.TypeFile
		case fi.IsDir():
			typ = manifests.TypeDir
		case fi.Mode()&fs.ModeSymlink != 0:
			typ = manifests.TypeSymlink
			target, err := os.Readlink(host)
			if err != nil {
				return bad("%v", err)
			}
			if err := manifests.CheckLinkTarget(path, target); err != nil {
				return bad("%v", err)
			}
		default:
			return bad("/%s is a %s", path, safefile.TypeName(fi.Mode()))
		}
		if rel == "." && displaced.Type != "" && typ != displaced.Type {
			return bad("/%s is a %s, but the apply displaced a %s there", path, typ, displaced.Type)
		}
		return nil
	})
}
