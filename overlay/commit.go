package overlay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// applyOne carries one verified overlay through the backend: stage it,
// keep its signed manifest, switch the tree, run the restart plan, and only
// then commit. When a restart fails the change is taken back, the same
// units are restarted on the old tree, and the ledger records the failed
// attempt.
func applyOne(ctx context.Context, b Backend, v *nodeView, a *Archive, states [2]tree.State, plan *Plan, r Restarter, progress func(string)) error {
	n := b.Node()
	m := a.Manifest
	last := v.ledger.Last()
	rec := manifests.LedgerEntry{
		Seq:        len(v.ledger.Entries),
		Action:     manifests.LedgerApply,
		Line:       m.Line,
		Version:    m.Version,
		Digest:     a.Digest,
		Image:      last.Image,
		Head:       manifests.Ref{Version: m.Version, Digest: a.Digest},
		TreeDigest: m.TreeDigest,
		Pending:    plan.Actions,
		Time:       time.Now().UTC().Format(time.RFC3339),
	}
	t, err := b.Stage(ctx, &node.Change{Manifest: m, Payload: a.Payload, Record: rec, Before: states[0], After: states[1]})
	if err != nil {
		return err
	}
	if err := n.StoreManifest(m.Version, a.Raw, a.Sig); err != nil {
		return errors.Join(err, t.Abort(ctx))
	}
	if err := t.Switch(ctx); err != nil {
		return err
	}
	if r != nil {
		if err := n.MarkRestarting(m.Version); err != nil {
			return errors.Join(err, t.Abort(ctx))
		}
		fault.Point("restarting")
		err := runPlan(ctx, r, plan.Actions, func(sa manifests.ServiceAction) {
			progress(fmt.Sprintf("%s %s", sa.Action, sa.Unit))
			plan.Restarted = append(plan.Restarted, sa)
		})
		if err != nil {
			return takeBack(ctx, n, t, v.ledger, rec, r, plan.Actions, err, progress)
		}
	}
	l, err := t.Commit(ctx, v.ledger)
	if err != nil {
		return errors.Join(err, t.Abort(ctx))
	}
	if r == nil {
		return nil
	}
	if err := recordRestarts(n, l, plan.Actions); err != nil {
		return err
	}
	return n.ClearRestarting()
}

// takeBack undoes a switched change whose restarts failed (cause), restarts
// the same units on the old tree and records the failed attempt.
func takeBack(ctx context.Context, n node.Node, t node.Txn, l *manifests.Ledger, rec manifests.LedgerEntry, r Restarter, actions []manifests.ServiceAction, cause error, progress func(string)) error {
	progress(fmt.Sprintf("restart failed, taking %s back: %v", rec.Version, cause))
	if err := t.Abort(ctx); err != nil {
		return fmt.Errorf("%w; taking %s back failed too, the next run retries: %v", cause, rec.Version, err)
	}
	var pending []manifests.ServiceAction
	rerr := runPlan(ctx, r, actions, func(sa manifests.ServiceAction) { progress(fmt.Sprintf("%s %s", sa.Action, sa.Unit)) })
	if rerr != nil {
		pending = actions
	}
	_, err := n.Commit(l, failedRecord(l, rec, cause.Error(), pending))
	if err == nil {
		err = n.ClearRestarting()
	}
	switch {
	case err != nil:
		return fmt.Errorf("overlay %s taken back: %w; recording the failure: %v", rec.Version, cause, err)
	case rerr != nil:
		return fmt.Errorf("overlay %s taken back: %w; restarts after taking it back failed too: %v", rec.Version, cause, rerr)
	}
	return fmt.Errorf("overlay %s taken back: %w", rec.Version, cause)
}

// recordRestarts appends a restart record for actions carried out.
func recordRestarts(n node.Node, l *manifests.Ledger, done []manifests.ServiceAction) error {
	if len(done) == 0 {
		return nil
	}
	last := l.Last()
	_, err := n.Commit(l, manifests.LedgerEntry{
		Action: manifests.LedgerRestart, Line: last.Line, Version: last.Version, Digest: last.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Done: done,
		Time: time.Now().UTC().Format(time.RFC3339),
	})
	return err
}
