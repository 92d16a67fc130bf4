package dirfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/sandbox"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// RunStaged runs argv (a service's validation command) against a staged,
// not yet switched apply, in a sandbox (package internal/sandbox:
// unprivileged, no network, a copy-on-write view) whose root is the
// node's tree with the change laid over it: the staged files, the new
// directories and owners, and the deletes, copied into a layer of their
// own (outside the node, with overlayfs whiteouts) and stacked over the
// node's root in a private mount namespace. The command reads the new
// configuration while the node and its services go on seeing the old
// one. The output (at most 64 KiB) is returned.
func (b *Backend) RunStaged(ctx context.Context, nt nodestate.Txn, argv []string) (string, error) {
	t, ok := nt.(*txn)
	if !ok || t.n.Root != b.n.Root || t.j.Record.Action != manifests.LedgerApply || t.switched {
		return "", fmt.Errorf("running %s: not a staged apply of this node", argv[0])
	}
	if err := manifests.ValidCommand(argv); err != nil {
		return "", err
	}
	root, err := filepath.Abs(b.n.Root)
	if err != nil {
		return "", err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err == nil && fs.Type == unix.OVERLAYFS_SUPER_MAGIC {
		// The change's stack and the sandbox's copy-on-write view over it
		// would be a third overlay: the kernel stacks two.
		return "", fmt.Errorf("%w: the node's root %s is on overlayfs (a container's root?): a validation command cannot run against a staged change there (the kernel stacks overlays two deep); run strata on the node's own root", sandbox.ErrSandbox, root)
	}
	work, err := scratch.MkdirTemp("staged")
	if err != nil {
		return "", fmt.Errorf("running %s against %s: %w", argv[0], t.j.Record.Version, err)
	}
	defer work.RemoveAll()
	// The layer's top directory is the stack's root: it takes the node
	// root's owner and mode, and holds nothing but the change.
	layer := filepath.Join(work.Path, "layer")
	top, _, err := current(b.n, "")
	if err == nil {
		err = tree.Create(layer, top, nil)
	}
	if err == nil {
		err = t.layView(layer)
	}
	if err != nil {
		return "", fmt.Errorf("laying out %s to validate it: %w", t.j.Record.Version, err)
	}
	return sandbox.Private(func() (string, error) {
		// Both layers id-mapped for the sandbox, so the stack shows the
		// tree's owners inside it; one mapped without the other would
		// show a tree of mixed owners.
		unmapped, err := sandbox.MapInPlace(layer, root)
		if err != nil {
			return "", err
		}
		if len(unmapped) == 1 {
			return "", fmt.Errorf("%w: %s cannot be id-mapped for the sandbox (its file system refuses it) while the rest can: set TMPDIR to a directory on the node's file system", sandbox.ErrSandbox, unmapped[0])
		}
		if err := sandbox.StackAt(root, layer, root); err != nil {
			return "", err
		}
		return sandbox.RunHere(ctx, sandbox.Spec{Root: root, Argv: argv, FileCaps: true})
	})
}

// layView writes the transaction's change as an overlayfs layer at dir:
// each staged file or link copied, each new or changed directory made
// with its owner and mode, each delete a whiteout, a directory that
// replaces a deleted one opaque. Directories on the way take the owner
// and mode the tree has after the change.
func (t *txn) layView(dir string) error {
	v := &layer{dir: dir, n: t.n, after: t.after}
	for i, o := range t.j.Ops {
		if err := v.parents(o.Path); err != nil {
			return err
		}
		p := v.path(o.Path)
		switch o.Kind {
		case opDelete:
			if err := unix.Mknod(p, unix.S_IFCHR, 0); err != nil {
				return fmt.Errorf("whiteout of /%s: %w", o.Path, err)
			}
		case opReplace:
			if err := v.clear(p); err != nil {
				return err
			}
			if err := copyOne(t.newPath(i), p, o.Entry); err != nil {
				return fmt.Errorf("/%s: %w", o.Path, err)
			}
		case opMkdir, opMeta:
			if err := v.mkdir(p, o); err != nil {
				return fmt.Errorf("/%s: %w", o.Path, err)
			}
		default:
			return fmt.Errorf("unknown journal op %q", o.Kind)
		}
	}
	return nil
}

// layer is a change being laid out as an overlayfs layer.
type layer struct {
	dir   string
	n     nodestate.Node
	after tree.State
}

func (v *layer) path(rel string) string { return filepath.Join(v.dir, filepath.FromSlash(rel)) }

// parents makes the directories above rel that the layer lacks, each
// with the owner and mode it has after the change (what the node has
// now when the change leaves it alone).
func (v *layer) parents(rel string) error {
	var todo []string
	for a := manifests.Parent(rel); a != ""; a = manifests.Parent(a) {
		if _, err := os.Lstat(v.path(a)); err == nil {
			break
		}
		todo = append(todo, a)
	}
	for i := len(todo) - 1; i >= 0; i-- {
		a := todo[i]
		e, ok := v.after[a]
		if !ok || e.Type != manifests.TypeDir {
			cur, exists, err := current(v.n, a)
			if err != nil {
				return err
			}
			if !exists || cur.Type != manifests.TypeDir {
				return fmt.Errorf("/%s: not a directory on the node or after the change: %w", a, nodestate.ErrDrift)
			}
			e = cur
		}
		if err := tree.Create(v.path(a), e, nil); err != nil {
			return err
		}
	}
	return nil
}

// clear removes a whiteout an earlier delete of the same path left.
func (v *layer) clear(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// mkdir lays out a directory op: made with its owner and mode (opaque when
// it replaces a directory the change deleted, so nothing of the old one
// shows through), or, when the layer has it already, given them.
func (v *layer) mkdir(p string, o op) error {
	fi, err := os.Lstat(p)
	switch {
	case err == nil && fi.IsDir():
		return tree.SetMeta(p, o.Entry)
	case err == nil:
		// A whiteout: the directory was deleted and is made anew.
		if err := os.Remove(p); err != nil {
			return err
		}
		if err := tree.Create(p, o.Entry, nil); err != nil {
			return err
		}
		return unix.Lsetxattr(p, "trusted.overlay.opaque", []byte("y"), 0)
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	return tree.Create(p, o.Entry, nil)
}
