package dirfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Backend changes the tree of a directory node.
type Backend struct {
	n nodestate.Node
}

// New returns the backend of the directory node n.
func New(n nodestate.Node) *Backend { return &Backend{n: n} }

// Node returns the node the backend changes.
func (b *Backend) Node() nodestate.Node { return b.n }

func undoDir(n nodestate.Node, version string) string {
	return filepath.Join(n.StateDir(), "undo", version)
}

// Interrupted describes a transaction a crash left unfinished, or returns
// "" when there is none. It changes nothing.
func (b *Backend) Interrupted() (string, error) {
	t, err := loadTxn(b.n)
	if err != nil || t == nil {
		return "", err
	}
	return fmt.Sprintf("an interrupted transaction is pending at %s", t.dir), nil
}

// Recover finishes or takes back a transaction a crash left: forward when
// the ledger l holds its record, back when not. When it takes back a
// change that had reached the tree, it returns that change's record.
func (b *Backend) Recover(ctx context.Context, l *manifests.Ledger) (*manifests.LedgerEntry, error) {
	t, err := loadTxn(b.n)
	if err != nil || t == nil {
		return nil, err
	}
	if t.j.Record.Action == "" {
		return nil, os.RemoveAll(t.dir)
	}
	last := l.Last()
	r := t.j.Record
	if last.Seq == r.Seq && last.Action == r.Action && last.Version == r.Version && last.Digest == r.Digest {
		return nil, t.finish()
	}
	// What the crash left is node state too: each object the undo puts
	// back is checked first, as a rollback checks its undo data.
	for i, o := range t.j.Ops {
		saved := t.n.Path(oldRel(i))
		if _, err := os.Lstat(saved); err != nil || o.Kind == opMeta {
			continue
		}
		if err := checkUndo(saved, o.Path, o.Old); err != nil {
			return nil, fmt.Errorf("node %s: rolling back an interrupted %s of %s: %w", b.n.Root, r.Action, r.Version, err)
		}
	}
	if err := t.undo(); err != nil {
		return nil, fmt.Errorf("node %s: rolling back an interrupted %s of %s: %w", b.n.Root, r.Action, r.Version, err)
	}
	if err := os.RemoveAll(t.dir); err != nil {
		return nil, err
	}
	return &r, nil
}

// Check refuses an overlay that would write or delete through a symlinked
// directory on the node.
func (b *Backend) Check(m *manifests.OverlayManifest) error {
	return checkNodePaths(b.n, m)
}

// Scan lists the node's tree, without strata's state directory.
func (b *Backend) Scan(ctx context.Context) ([]manifests.Entry, error) {
	return tree.ScanContext(ctx, b.n.Root, manifests.IsNodeState)
}

// Stage writes ch's payload aside in a new transaction and plans its
// journal against the node's current tree.
func (b *Backend) Stage(ctx context.Context, ch *nodestate.Change) (nodestate.Txn, error) {
	m := ch.Manifest
	if err := checkNodePaths(b.n, m); err != nil {
		return nil, err
	}
	t, err := begin(b.n)
	if err != nil {
		return nil, err
	}
	ops, index, err := planOps(b.n, m)
	if err != nil {
		t.abort()
		return nil, err
	}
	err = ch.Payload(ctx, func(e manifests.Entry, r io.Reader) error {
		i := index[e.Path]
		if ops[i].Kind != opReplace {
			return nil
		}
		// Content is checked by Payload at the member's end, with an error
		// that names the member; Create only writes it.
		e.SHA256 = ""
		return tree.Create(t.newPath(i), e, r)
	})
	if err != nil {
		t.abort()
		return nil, err
	}
	t.j = journal{Ops: ops, Record: ch.Record}
	t.after = ch.After
	return t, nil
}

// StageRevert stages undoing the node's last overlay, ch.Manifest, from
// the undo data its apply kept (checked first, see CheckRevert); ch.Record
// is the rollback record.
func (b *Backend) StageRevert(ctx context.Context, ch *nodestate.Change) (nodestate.Txn, error) {
	orig, undo, err := b.checkRevert(ch)
	if err != nil {
		return nil, err
	}
	t, err := begin(b.n)
	if err != nil {
		return nil, err
	}
	ops, err := inverseOps(t, orig, undo)
	if err != nil {
		t.abort()
		return nil, err
	}
	t.j = journal{Ops: ops, Record: ch.Record}
	return t, nil
}

// CheckRevert checks, changing nothing, that ch.Manifest's overlay can be
// rolled back: its undo data is there, its journal valid, no restored
// path below a symlinked directory, and every object it would restore
// safe to copy back (see checkUndo).
func (b *Backend) CheckRevert(ctx context.Context, ch *nodestate.Change) error {
	_, _, err := b.checkRevert(ch)
	return err
}

func (b *Backend) checkRevert(ch *nodestate.Change) (journal, string, error) {
	version := ch.Manifest.Version
	undo := undoDir(b.n, version)
	if fi, err := os.Lstat(undo); errors.Is(err, os.ErrNotExist) {
		return journal{}, "", fmt.Errorf("rolling back %s: its undo data is gone (strata gc keeps it for the newest overlays only): %w", version, ErrUndoPruned)
	} else if err != nil {
		return journal{}, "", fmt.Errorf("rolling back %s: undo data: %w", version, err)
	} else if !fi.IsDir() {
		return journal{}, "", fmt.Errorf("rolling back %s: undo data %s is not a directory (%s): %w", version, undo, safefile.TypeName(fi.Mode()), nodestate.ErrBadState)
	}
	raw, err := safefile.Read(filepath.Join(undo, "journal.json"), manifests.MaxManifestSize)
	if errors.Is(err, os.ErrNotExist) {
		return journal{}, "", fmt.Errorf("rolling back %s: undo data %s has no journal: %w", version, undo, nodestate.ErrBadState)
	}
	if err != nil {
		return journal{}, "", fmt.Errorf("rolling back %s: undo data: %w", version, err)
	}
	var orig journal
	if err := manifests.Decode(raw, &orig); err != nil {
		return journal{}, "", fmt.Errorf("rolling back %s: undo data: %w", version, err)
	}
	if err := orig.validate(); err != nil {
		return journal{}, "", fmt.Errorf("rolling back %s: undo data: %w", version, err)
	}
	var paths []string
	for _, o := range orig.Ops {
		paths = append(paths, o.Path)
	}
	if err := checkParents(b.n, paths); err != nil {
		return journal{}, "", fmt.Errorf("rolling back %s: %w", version, err)
	}
	if err := checkSaved(orig, undo); err != nil {
		return journal{}, "", fmt.Errorf("rolling back %s: %w", version, err)
	}
	return orig, undo, nil
}

// Switch writes the journal, runs its ops and syncs the file system; any
// failure undoes what ran.
func (t *txn) Switch(ctx context.Context) error {
	if err := t.writeJournal(); err != nil {
		t.abort()
		return err
	}
	if err := t.run(); err != nil {
		if uerr := t.undo(); uerr != nil {
			return fmt.Errorf("%w; undo failed, the next run will retry: %v", err, uerr)
		}
		t.abort()
		return err
	}
	// Everything the ops wrote must be on disk before the ledger says it
	// is: one syncfs flushes the staged files and the renames together.
	if err := safefile.SyncFS(t.n.Root); err != nil {
		if uerr := t.undo(); uerr == nil {
			t.abort()
		}
		return err
	}
	t.switched = true
	return nil
}

// Commit appends the record to the ledger, then keeps what the change
// displaced as undo data (an apply) or drops the undo data it consumed (a
// rollback).
func (t *txn) Commit(ctx context.Context, l *manifests.Ledger) (*manifests.Ledger, error) {
	fault.Point("before-ledger")
	next, err := t.n.Commit(l, t.j.Record)
	if err != nil {
		return nil, err
	}
	fault.Point("after-ledger")
	if err := t.finish(); err != nil {
		return next, fmt.Errorf("keeping the undo data of %s: %w", t.j.Record.Version, err)
	}
	return next, nil
}

// Abort undoes a switched change and removes the transaction.
func (t *txn) Abort(ctx context.Context) error {
	if held, err := t.n.Holds(t.j.Record); err != nil || held {
		if err == nil {
			err = nodestate.ErrCommitted
		}
		return fmt.Errorf("taking back %s: %w", t.j.Record.Version, err)
	}
	if t.switched {
		if err := t.undo(); err != nil {
			return fmt.Errorf("taking back %s: %w", t.j.Record.Version, err)
		}
	}
	t.abort()
	return nil
}

// finish keeps what a committed transaction displaced: an apply's old
// objects become the overlay's undo data; a rollback's are dropped along
// with the undo data it consumed.
func (t *txn) finish() error {
	r := t.j.Record
	_ = os.RemoveAll(filepath.Join(t.dir, "new"))
	if r.Action == manifests.LedgerApply {
		dst := undoDir(t.n, r.Version)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		_ = os.RemoveAll(dst)
		return os.Rename(t.dir, dst)
	}
	if err := os.RemoveAll(undoDir(t.n, r.Version)); err != nil {
		return err
	}
	return os.RemoveAll(t.dir)
}

// ErrUndoPruned reports a rollback past the undo data gc kept.
var ErrUndoPruned = manifests.Rejection("dirfs: undo data pruned")

// Prune removes the undo data of all but the newest keep overlays in
// effect per ledger l (they can no longer be rolled back), and undo data
// no overlay in effect owns. It returns the versions whose data went.
func (b *Backend) Prune(l *manifests.Ledger, keep int) ([]string, error) {
	applied := l.Applied()
	want := map[string]bool{}
	for i := max(len(applied)-keep, 0); i < len(applied); i++ {
		want[applied[i].Version] = true
	}
	dir := filepath.Join(b.n.StateDir(), "undo")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pruning undo data: %w", err)
	}
	var gone []string
	for _, e := range ents {
		if want[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return gone, fmt.Errorf("pruning undo data: %w", err)
		}
		gone = append(gone, e.Name())
	}
	return gone, safefile.SyncDir(dir)
}
