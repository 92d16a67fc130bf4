package overlayfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/erofs"
	"github.com/strata-dev/strata/internal/layer"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// opaqueXattr marks a layer directory that hides everything below it in
// the layers underneath.
const opaqueXattr = "trusted.overlay.opaque"

// layerNodes lists the layer of ch (layer.Nodes); a parent that is not
// a directory in the tree after it is drift.
func layerNodes(ch *nodestate.Change) ([]erofs.Node, error) {
	nodes, err := layer.Nodes(ch.Manifest, ch.After)
	if errors.Is(err, layer.ErrParent) {
		return nil, fmt.Errorf("writing layer: %w: %w", nodestate.ErrDrift, err)
	}
	return nodes, err
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
