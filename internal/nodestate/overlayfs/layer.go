package overlayfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/erofs"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// opaqueXattr marks a layer directory that hides everything below it in
// the layers underneath.
const opaqueXattr = "trusted.overlay.opaque"

// layerNodes lists the layer of ch, parents before children: every
// entry with its owner and mode, every parent directory with the owner
// and mode the tree after the change gives it (the topmost layer holding
// a directory decides how the stack shows it), every deleted path as a
// whiteout, and a directory that replaces a deleted one as opaque. It
// depends on the manifest and the tree after the change only, so every
// node that applies an overlay to the same tree gets the same layer.
func layerNodes(ch *nodestate.Change) ([]erofs.Node, error) {
	p := &layerPlan{ch: ch, deleted: map[string]bool{}, nodes: map[string]erofs.Node{}}
	for _, d := range ch.Manifest.Deletes {
		p.deleted[d] = true
	}
	for _, e := range ch.Manifest.Entries {
		if err := p.parents(e.Path); err != nil {
			return nil, err
		}
		n, err := node(e)
		if err != nil {
			return nil, err
		}
		n.Opaque = n.Type == erofs.Dir && p.deleted[e.Path]
		p.nodes[e.Path] = n
	}
	deletes := append([]string{}, ch.Manifest.Deletes...)
	sort.Strings(deletes)
	for _, d := range deletes {
		if _, made := p.nodes[d]; made || p.underDeleted(d) {
			continue // re-created (opaque) or inside a deleted directory
		}
		if err := p.parents(d); err != nil {
			return nil, err
		}
		p.nodes[d] = erofs.Node{Path: d, Type: erofs.Whiteout}
	}
	out := make([]erofs.Node, 0, len(p.nodes))
	for _, n := range p.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

type layerPlan struct {
	ch      *nodestate.Change
	deleted map[string]bool
	nodes   map[string]erofs.Node
}

// underDeleted reports whether a parent of p is itself deleted and not
// made again.
func (p *layerPlan) underDeleted(path string) bool {
	for d := manifests.Parent(path); d != ""; d = manifests.Parent(d) {
		if _, made := p.nodes[d]; p.deleted[d] && !made {
			return true
		}
	}
	return false
}

// parents adds the missing parent directories of path.
func (p *layerPlan) parents(path string) error {
	for d := manifests.Parent(path); d != ""; d = manifests.Parent(d) {
		if _, made := p.nodes[d]; made {
			return nil
		}
		e, ok := p.ch.After[d]
		if !ok || e.Type != manifests.TypeDir {
			return fmt.Errorf("writing layer: parent %s of %s is not a directory in the tree after the change: %w", d, path, nodestate.ErrDrift)
		}
		n, err := node(e)
		if err != nil {
			return err
		}
		n.Opaque = p.deleted[d]
		p.nodes[d] = n
	}
	return nil
}

// node is the layer node of a tree entry. A symbolic link's mode is
// 0777, as on any file system.
func node(e manifests.Entry) (erofs.Node, error) {
	n := erofs.Node{Path: e.Path, Mode: uint32(e.Mode) & 0o7777, UID: uint32(e.UID), GID: uint32(e.GID), Size: e.Size, Target: e.Target}
	switch e.Type {
	case manifests.TypeDir:
		n.Type = erofs.Dir
	case manifests.TypeFile:
		n.Type = erofs.File
	case manifests.TypeSymlink:
		n.Type, n.Mode = erofs.Symlink, 0o777
	default:
		return n, fmt.Errorf("writing layer: %s: type %q: %w", e.Path, e.Type, tree.ErrSpecialFile)
	}
	return n, nil
}

// writeLayer writes the layer of ch as the new directory dir: the form
// of layers written before layer images, which a repair of such a layer
// keeps.
func writeLayer(ctx context.Context, dir string, ch *nodestate.Change) error {
	nodes, err := layerNodes(ch)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("writing layer: %w", err)
	}
	host := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	for _, n := range nodes {
		p := host(n.Path)
		switch n.Type {
		case erofs.Whiteout:
			if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("writing whiteout for %s: %w", n.Path, &os.PathError{Op: "mknod", Path: p, Err: err})
			}
		case erofs.Dir, erofs.Symlink:
			typ := manifests.TypeDir
			if n.Type == erofs.Symlink {
				typ = manifests.TypeSymlink
			}
			if err := tree.Create(p, manifests.Entry{Path: n.Path, Type: typ, Mode: manifests.Mode(n.Mode), UID: int(n.UID), GID: int(n.GID), Target: n.Target}, nil); err != nil {
				return err
			}
			if n.Opaque {
				if err := unix.Lsetxattr(p, opaqueXattr, []byte("y"), 0); err != nil {
					return fmt.Errorf("marking %s opaque: %w", n.Path, &os.PathError{Op: "setxattr", Path: p, Err: err})
				}
			}
		}
	}
	return ch.Payload(ctx, func(e manifests.Entry, r io.Reader) error {
		if e.Type != manifests.TypeFile {
			return nil
		}
		e.SHA256 = "" // content is checked by Payload at the member's end
		return tree.Create(host(e.Path), e, r)
	})
}
