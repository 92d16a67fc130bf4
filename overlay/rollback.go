package overlay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/systemd"
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
	// Live is the plan as resolved against the running service manager.
	Live *systemd.Resolved `json:"live,omitempty"`
}

// Rollback reverts the last applied overlay of the node at root from the
// undo data kept when it was applied, records a rollback in the ledger and
// runs the restart plan for what it reverted (r nil: recorded as pending).
func Rollback(ctx context.Context, root string, r Restarter, lockWait time.Duration, progress func(string)) (*RollbackReport, error) {
	if progress == nil {
		progress = func(string) {}
	}
	b, unlock, err := lockNode(ctx, root, lockWait)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := refuseStaged(b.Node(), "rollback"); err != nil {
		return nil, err
	}
	return rollbackLocked(ctx, b, r, progress)
}

func rollbackLocked(ctx context.Context, b Backend, r Restarter, progress func(string)) (*RollbackReport, error) {
	n := b.Node()
	v, err := loadView(n)
	if err != nil {
		return nil, err
	}
	if len(v.applied) == 0 {
		return nil, fmt.Errorf("node %s is at its image %s: %w", n.Root, v.head().Version, ErrNothingToRollback)
	}
	last := v.applied[len(v.applied)-1]
	m := v.overlays[len(v.overlays)-1]
	prev := v.ledger.Canonical()
	if len(v.applied) > 1 {
		prev = v.applied[len(v.applied)-2]
	}
	before, err := v.expectedAfter(len(v.overlays) - 1)
	if err != nil {
		return nil, err
	}
	after, err := v.expected()
	if err != nil {
		return nil, err
	}
	// Rolling back changes the tree from after the overlay to before it.
	plan := planFor(m, v.catalog(), after, before)
	rec := manifests.LedgerEntry{
		Seq:        len(v.ledger.Entries),
		Action:     manifests.LedgerRollback,
		Line:       last.Line,
		Version:    last.Version,
		Digest:     last.Digest,
		Image:      last.Image,
		Head:       prev.Head,
		TreeDigest: before.Digest(),
		Pending:    plan.Actions,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}
	t, err := b.StageRevert(ctx, &node.Change{Manifest: m, Record: rec})
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("rolling back %s to %s", last.Version, prev.Head.Version))
	if err := t.Switch(ctx); err != nil {
		return nil, err
	}
	l, err := t.Commit(ctx, v.ledger)
	if l == nil {
		return nil, errors.Join(err, t.Abort(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("rollback of %s committed, but finishing it failed (the next run retries): %w", last.Version, err)
	}
	if err := n.DropManifest(last.Version); err != nil {
		return nil, err
	}
	rep := &RollbackReport{Root: n.Root, Reverted: last.Head, Head: prev.Head, Actions: plan.Actions}
	if r == nil {
		return rep, nil
	}
	res, err := runPlan(ctx, r, planRequest{actions: plan.Actions, catalog: v.catalog(), changed: changedPaths(m, before)}, func(a manifests.ServiceAction) {
		progress(fmt.Sprintf("%s %s", a.Action, a.Unit))
		rep.Restarted = append(rep.Restarted, a)
	})
	rep.Live = res
	if err != nil {
		return rep, err
	}
	return rep, recordRestarts(n, l, plan.Actions, rebootDue(res))
}
