package overlayfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// opaqueXattr marks a layer directory that hides everything below it in
// the layers underneath.
const opaqueXattr = "trusted.overlay.opaque"

// layerWriter builds one layer directory from a change.
type layerWriter struct {
	dir     string
	ch      *nodestate.Change
	deleted map[string]bool
	made    map[string]bool
}

// writeLayer writes the layer of ch into the new directory dir: every
// entry with its owner and mode, every parent directory with the owner and
// mode the tree after the change gives it (the topmost layer holding a
// directory decides how the stack shows it), every deleted path as a
// whiteout, and a directory that replaces a deleted one as opaque.
func writeLayer(ctx context.Context, dir string, ch *nodestate.Change) error {
	w := &layerWriter{dir: dir, ch: ch, deleted: map[string]bool{}, made: map[string]bool{}}
	for _, d := range ch.Manifest.Deletes {
		w.deleted[d] = true
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("writing layer: %w", err)
	}
	err := ch.Payload(ctx, func(e manifests.Entry, r io.Reader) error {
		if err := w.parents(e.Path); err != nil {
			return err
		}
		return w.entry(e, r)
	})
	if err != nil {
		return err
	}
	deletes := append([]string{}, ch.Manifest.Deletes...)
	sort.Strings(deletes)
	for _, d := range deletes {
		if w.made[d] || w.underDeleted(d) {
			continue // re-created (opaque) or inside a deleted directory
		}
		if err := w.parents(d); err != nil {
			return err
		}
		p := w.host(d)
		if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
			return fmt.Errorf("writing whiteout for %s: %w", d, &os.PathError{Op: "mknod", Path: p, Err: err})
		}
	}
	return nil
}

func (w *layerWriter) host(rel string) string { return filepath.Join(w.dir, filepath.FromSlash(rel)) }

// underDeleted reports whether a parent of p is itself deleted.
func (w *layerWriter) underDeleted(p string) bool {
	for d := manifests.Parent(p); d != ""; d = manifests.Parent(d) {
		if w.deleted[d] && !w.made[d] {
			return true
		}
	}
	return false
}

// parents creates the missing parent directories of p.
func (w *layerWriter) parents(p string) error {
	var missing []string
	for d := manifests.Parent(p); d != "" && !w.made[d]; d = manifests.Parent(d) {
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		e, ok := w.ch.After[d]
		if !ok || e.Type != manifests.TypeDir {
			return fmt.Errorf("writing layer: parent %s of %s is not a directory in the tree after the change: %w", d, p, nodestate.ErrDrift)
		}
		if err := w.dirEntry(e); err != nil {
			return err
		}
	}
	return nil
}

func (w *layerWriter) dirEntry(e manifests.Entry) error {
	p := w.host(e.Path)
	if err := tree.Create(p, e, nil); err != nil {
		return err
	}
	w.made[e.Path] = true
	if w.deleted[e.Path] {
		if err := unix.Lsetxattr(p, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("marking %s opaque: %w", e.Path, &os.PathError{Op: "setxattr", Path: p, Err: err})
		}
	}
	return nil
}

func (w *layerWriter) entry(e manifests.Entry, r io.Reader) error {
	if e.Type == manifests.TypeDir {
		if w.made[e.Path] {
			return tree.SetMeta(w.host(e.Path), e)
		}
		return w.dirEntry(e)
	}
	// Content is checked by Payload at the member's end.
	e.SHA256 = ""
	if err := tree.Create(w.host(e.Path), e, r); err != nil {
		return err
	}
	w.made[e.Path] = true
	return nil
}
