package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
)

// lockBackend takes the node's apply lock and settles whatever a crash
// left, so the caller starts from a settled node.
func lockBackend(ctx context.Context, b nodestate.Backend, root string, wait time.Duration, progress func(string)) (func(), error) {
	unlock, err := b.Node().Lock(ctx, wait)
	if err != nil {
		return nil, err
	}
	if b.Node().ReadOnly() {
		// A read-only check of an offline disk: nothing is settled,
		// and a transaction to settle refuses the check.
		if err := refuseInterrupted(b, root); err != nil {
			unlock()
			return nil, err
		}
		return unlock, nil
	}
	if err := recoverTxn(ctx, b, progress); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// refuseInterrupted returns ErrInterrupted (with ErrDrift) when the
// node has a transaction a crash interrupted, which a run that changes
// the node settles first.
func refuseInterrupted(b nodestate.Backend, root string) error {
	what, err := b.Interrupted()
	if err != nil {
		return err
	}
	if what != "" {
		return fmt.Errorf("node %s: %s; any strata run that changes the node (apply-overlay without --dry-run, rollback, restart, gc) finishes it first: %w: %w", root, what, ErrDrift, ErrInterrupted)
	}
	return nil
}

// recoverTxn has the backend recover from a crash. An apply it took back
// while its services were being restarted is recorded as failed, with its
// restarts due: the services may have seen the change. The temporary
// files interrupted writes of node state left are removed, and progress
// (if not nil) is told which.
func recoverTxn(ctx context.Context, b nodestate.Backend, progress func(string)) error {
	n := b.Node()
	strays, err := n.RemoveStrays()
	if err != nil {
		return err
	}
	if len(strays) > 0 && progress != nil {
		progress(fmt.Sprintf("removed %d temporary files interrupted writes of node state left: %s", len(strays), strings.Join(strays, " ")))
	}
	l, err := n.ReadLedger()
	if err != nil {
		return err
	}
	undone, err := b.Recover(ctx, l)
	if err != nil {
		return err
	}
	restarting, err := n.Restarting()
	if err != nil {
		return err
	}
	if undone != nil && undone.Action == manifests.LedgerApply && restarting == undone.Version {
		if l, err = n.Commit(l, failedRecord(l, *undone, "interrupted while its services restarted", undone.Pending)); err != nil {
			return err
		}
	}
	// Only the manifests of the overlays in effect stay: a rollback that
	// committed before a crash, or an apply that never did, leaves one.
	var keep []string
	for _, e := range l.Applied() {
		keep = append(keep, e.Version)
	}
	if err := n.PruneManifests(keep); err != nil {
		return err
	}
	return n.ClearRestarting()
}

// failedRecord records that the overlay of attempt was taken back.
func failedRecord(l *manifests.Ledger, attempt manifests.LedgerEntry, why string, pending []manifests.ServiceAction) manifests.LedgerEntry {
	last := l.Last()
	return manifests.LedgerEntry{
		Action: manifests.LedgerFailed, Line: attempt.Line, Version: attempt.Version, Digest: attempt.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest,
		Pending: pending, Error: manifests.RecordText(why), Signer: attempt.Signer, Time: time.Now().UTC().Format(time.RFC3339),
	}
}
