package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// RollbackReport describes a rollback.
type RollbackReport struct {
	Root string `json:"root"`
	// Reverted is the overlay undone; Head the node's head afterwards.
	Reverted  manifests.Ref             `json:"reverted"`
	Head      manifests.Ref             `json:"head"`
	Actions   []manifests.ServiceAction `json:"actions"`
	Restarted []manifests.ServiceAction `json:"restarted,omitempty"`
}

// Rollback reverts the last applied overlay of the node at root from the
// undo data kept when it was applied, records a rollback in the ledger and
// runs the restart plan for what it reverted (r nil: recorded as pending).
func Rollback(ctx context.Context, root string, r Restarter, lockWait time.Duration, progress func(string)) (*RollbackReport, error) {
	if progress == nil {
		progress = func(string) {}
	}
	n, unlock, err := lockNode(ctx, root, lockWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return rollbackLocked(ctx, n, r, progress)
}

func rollbackLocked(ctx context.Context, n node.Node, r Restarter, progress func(string)) (*RollbackReport, error) {
	v, err := loadView(n)
	if err != nil {
		return nil, err
	}
	if len(v.applied) == 0 {
		return nil, fmt.Errorf("node %s is at its image %s: %w", n.Root, v.head().Version, ErrNothingToRollback)
	}
	last := v.applied[len(v.applied)-1]
	m := v.overlays[len(v.overlays)-1]
	prev := v.ledger.Entries[0]
	if len(v.applied) > 1 {
		prev = v.applied[len(v.applied)-2]
	}
	undo := undoDir(n, last.Version)
	b, err := os.ReadFile(filepath.Join(undo, "journal.json"))
	if err != nil {
		return nil, fmt.Errorf("rolling back %s: undo data: %w", last.Version, err)
	}
	var orig journal
	if err := manifests.Decode(b, &orig); err != nil {
		return nil, fmt.Errorf("rolling back %s: undo data: %w", last.Version, err)
	}
	if err := orig.validate(); err != nil {
		return nil, fmt.Errorf("rolling back %s: undo data: %w", last.Version, err)
	}
	var paths []string
	for _, o := range orig.Ops {
		paths = append(paths, o.Path)
	}
	if err := checkParents(n, paths); err != nil {
		return nil, fmt.Errorf("rolling back %s: %w", last.Version, err)
	}
	t, err := begin(n)
	if err != nil {
		return nil, err
	}
	ops, err := inverseOps(t, orig, undo)
	if err != nil {
		t.abort()
		return nil, err
	}
	before, err := v.expectedAfter(len(v.overlays) - 1)
	if err != nil {
		t.abort()
		return nil, err
	}
	after, err := v.expected()
	if err != nil {
		t.abort()
		return nil, err
	}
	// Rolling back changes the tree from after the overlay to before it.
	plan := planFor(m, v.catalog(), after, before)
	t.j = journal{Ops: ops, Record: manifests.LedgerEntry{
		Seq:        len(v.ledger.Entries),
		Action:     manifests.LedgerRollback,
		Line:       last.Line,
		Version:    last.Version,
		Digest:     last.Digest,
		Image:      last.Image,
		Head:       prev.Head,
		TreeDigest: prev.TreeDigest,
		Pending:    plan.Actions,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}}
	progress(fmt.Sprintf("rolling back %s to %s", last.Version, prev.Head.Version))
	if err := commit(t, v.ledger); err != nil {
		return nil, err
	}
	rep := &RollbackReport{Root: n.Root, Reverted: last.Head, Head: prev.Head, Actions: plan.Actions}
	if r == nil {
		return rep, nil
	}
	err = runPlan(ctx, r, plan.Actions, func(a manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", a.Action, a.Unit))
		rep.Restarted = append(rep.Restarted, a)
	})
	if err != nil {
		return rep, err
	}
	return rep, recordRestarts(n, plan.Actions)
}

// inverseOps builds the ops that undo orig, staging copies of the objects
// orig displaced (the undo data stays intact until the rollback commits).
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

func copyOne(src, dst string, e manifests.Entry) error {
	if e.Type != manifests.TypeFile {
		return tree.Create(dst, e, nil)
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tree.Create(dst, e, f); err != nil {
		return errors.Join(err)
	}
	return nil
}
