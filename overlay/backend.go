package overlay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/node/dirfs"
	"github.com/strata-dev/strata/internal/node/overlayfs"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// Backend is the node side of apply and rollback: it owns how the node's
// tree changes and what a crash leaves behind. The engine here keeps what
// is format and policy: opening and verifying overlays, the sequence, the
// expected trees, restart plans and which records the ledger gets.
type Backend interface {
	// Node returns the node whose tree the backend changes.
	Node() node.Node
	// Interrupted describes what a crash left unsettled ("" for nothing),
	// changing nothing.
	Interrupted() (string, error)
	// Recover settles what a crash left, so the tree is ledger l's head;
	// it returns the record of a change it took back after that change had
	// reached the tree (its services may have seen it).
	Recover(ctx context.Context, l *manifests.Ledger) (*manifests.LedgerEntry, error)
	// Check refuses an overlay the node's tree cannot take safely.
	Check(m *manifests.OverlayManifest) error
	// Stage prepares an overlay's change aside.
	Stage(ctx context.Context, ch *node.Change) (node.Txn, error)
	// StageRevert prepares taking back the last applied overlay.
	StageRevert(ctx context.Context, ch *node.Change) (node.Txn, error)
	// CheckRevert checks, changing nothing, that an applied overlay
	// (ch.Manifest) can be taken back.
	CheckRevert(ctx context.Context, ch *node.Change) error
	// Scan lists the node's current tree, without strata's state.
	Scan(ctx context.Context) ([]manifests.Entry, error)
}

var _ Backend = (*dirfs.Backend)(nil)

var _ Backend = (*overlayfs.Backend)(nil)

// openBackend returns the backend the state of the node at root names.
func openBackend(root string) (Backend, error) {
	n := node.Node{Root: root}
	if err := n.CheckState(); err != nil {
		return nil, err
	}
	name, err := n.Backend()
	if err != nil {
		return nil, err
	}
	if name == node.BackendOverlayfs {
		// Mounts are found by path in the mount table: the root must be
		// the absolute path without links that the table shows.
		if n.Root, err = canonical(root); err != nil {
			return nil, err
		}
		hs, err := managedOf(n)
		if err != nil {
			return nil, err
		}
		return overlayfs.New(n, overlayfs.WithHierarchies(hs)), nil
	}
	return dirfs.New(n), nil
}

// managedOf reads the managed hierarchies of the node's image.
func managedOf(n node.Node) ([]string, error) {
	raw, err := safefile.Read(n.Path(manifests.ImageManifestPath), 256<<20)
	if err != nil {
		return nil, fmt.Errorf("node %s: reading image manifest: %w", n.Root, err)
	}
	m, err := decodeImage(raw, manifests.Digest(raw))
	if err != nil {
		return nil, fmt.Errorf("node %s: image manifest: %w", n.Root, err)
	}
	return m.Managed(), nil
}

// ActivateReport describes an activation.
type ActivateReport struct {
	Root string        `json:"root"`
	Head manifests.Ref `json:"head"`
	// Layers are the overlays stacked, oldest first.
	Layers []string `json:"layers"`
	// Trial is the image of a staged upgrade the node boots for the
	// first time (its health decides: strata upgrade --confirm).
	Trial *manifests.Ref `json:"trial,omitempty"`
	// FailedUpgrade is the failed record written because the node booted
	// its old image again after an upgrade was staged.
	FailedUpgrade *manifests.LedgerEntry `json:"failed_upgrade,omitempty"`
}

// Activate builds the overlayfs stacks of the node at root from its
// ledger (run: the runtime directory, default ROOT/run). On a running
// node it settles an interrupted switch and rebuilds the stacks; offline
// (a mounted disk) it stacks the layers. A boot runs ActivateBoot.
func Activate(ctx context.Context, root, run string) (*ActivateReport, error) {
	if err := activate(ctx, root, run); err != nil {
		return nil, err
	}
	ev, err := node.Node{Root: root}.Effective()
	if err != nil {
		return nil, err
	}
	rep := &ActivateReport{Root: root, Head: ev.Ledger.Last().Head, Layers: []string{}}
	for _, e := range ev.Ledger.Applied() {
		rep.Layers = append(rep.Layers, e.Version)
	}
	if ev.Trial {
		rep.Trial = &manifests.Ref{Version: ev.Staged.Record.Version, Digest: ev.Staged.Record.Digest}
	}
	return rep, nil
}

// ActivateBoot is Activate at boot (an initramfs runs it before PID 1
// starts): it also settles a staged upgrade the node did not boot into
// (SettleUpgrade, with the running kernel's boot id), recording it as
// failed.
func ActivateBoot(ctx context.Context, root, run string) (*ActivateReport, error) {
	rep, err := Activate(ctx, root, run)
	if err != nil {
		return nil, err
	}
	bootID, err := node.BootID()
	if err != nil {
		return rep, err
	}
	fb, err := SettleUpgrade(ctx, root, bootID)
	if err != nil {
		return rep, err
	}
	rep.FailedUpgrade = fb.Failed
	return rep, nil
}

func activate(ctx context.Context, root, run string) error {
	root, err := canonical(root)
	if err != nil {
		return err
	}
	if run != "" {
		if run, err = filepath.Abs(run); err != nil {
			return err
		}
	}
	n := node.Node{Root: root}
	if err := n.CheckState(); err != nil {
		return err
	}
	name, err := n.Backend()
	if err != nil {
		return err
	}
	if name != node.BackendOverlayfs {
		return fmt.Errorf("activating %s: the node's backend is %s, not overlayfs: %w", root, name, ErrDrift)
	}
	hs, err := managedOf(n)
	if err != nil {
		return err
	}
	opts := []overlayfs.Option{overlayfs.WithHierarchies(hs)}
	if run != "" {
		opts = append(opts, overlayfs.WithRun(run))
	}
	b := overlayfs.New(n, opts...)
	unlock, err := n.Lock(ctx, 0)
	if err != nil {
		return err
	}
	defer unlock()
	if n.ReadOnly() {
		// An offline disk mounted read-only to be checked: the layers
		// are stacked as they are; an interrupted transaction is left
		// for the audit to report or the check to refuse.
		return b.Activate(ctx)
	}
	if err := recoverTxn(ctx, b, nil); err != nil {
		return err
	}
	return b.Activate(ctx)
}

// canonical returns root as an absolute path without symlinks.
func canonical(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("node %s: no such directory: %w", root, node.ErrNotNode)
	}
	if err != nil {
		return "", fmt.Errorf("node %s: %w", root, err)
	}
	return real, nil
}
