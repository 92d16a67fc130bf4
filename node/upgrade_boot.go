package node

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// ConfirmReport says what Confirm found and did.
type ConfirmReport struct {
	Root string `json:"root"`
	// Image is the image the node runs.
	Image manifests.Ref `json:"image"`
	// Trial reports a trial boot of a staged upgrade; Confirmed that its
	// record was committed.
	Trial     bool `json:"trial"`
	Confirmed bool `json:"confirmed"`
	// Record is the committed upgrade record.
	Record *manifests.LedgerEntry `json:"record,omitempty"`
	// Note says why nothing was confirmed.
	Note string `json:"note,omitempty"`
}

// HealthCheck decides whether a booted node is healthy.
type HealthCheck func(ctx context.Context, cat manifests.Catalog) error

// Confirm is what a trial boot of a staged upgrade runs once the
// system is up (before boot-complete.target, so the boot loader entry is
// blessed only after it): health must pass, then the upgrade's record is
// appended to the ledger, the staged upgrade removed, and the layers the
// upgrade did not keep go. On a boot that is not a trial it checks
// nothing (an unhealthy node that is not on trial is not the boot
// loader's business). A failed health check (ErrUnhealthy) commits
// nothing: the boot is not blessed, and once the entry's tries are used
// up the node falls back to its old image, where SettleUpgrade records
// the failure.
func (h *Node) Confirm(ctx context.Context, health HealthCheck) (*ConfirmReport, error) {
	b, root := h.b, h.root
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := b.Node()
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	run := v.Ledger.Running()
	rep := &ConfirmReport{Root: root, Image: manifests.Ref{Version: run.Version, Digest: run.Digest}, Trial: v.Trial}
	switch {
	case v.Staged == nil:
		rep.Note = "no upgrade is staged"
		return rep, nil
	case !v.Trial && run.Digest == v.Staged.Record.Digest:
		// Committed by a run that stopped before it removed the staged
		// state: finish that.
		rep.Confirmed, rep.Note = true, "the upgrade was committed before; its staged state is removed now"
		if err := n.ClearStaged(); err != nil {
			return rep, err
		}
		return rep, tidyImages(ctx, b, v.Ledger)
	case !v.Trial:
		rep.Note = fmt.Sprintf("the node runs image %s, not the staged image %s", run.Version, v.Staged.Record.Version)
		return rep, nil
	}
	// A trial whose boot activation failed runs the plain image: its
	// layers are not in effect, whatever the services say.
	if lv, ok := b.(interface{ Live() (bool, error) }); ok {
		if active, err := lv.Live(); err != nil {
			return rep, err
		} else if !active {
			return rep, fmt.Errorf("node %s on a trial boot of image %s: %w: its layers are not stacked (boot activation failed or was skipped)", root, run.Version, ErrUnhealthy)
		}
	}
	if err := health(ctx, v.Catalog()); err != nil {
		return rep, fmt.Errorf("node %s on a trial boot of image %s: %w: %w", root, run.Version, ErrUnhealthy, err)
	}
	l, err := n.ReadLedger()
	if err != nil {
		return rep, err
	}
	rec := v.Staged.Record
	rec.Time = time.Now().UTC().Format(time.RFC3339)
	if l, err = n.Commit(l, rec); err != nil {
		return rep, err
	}
	last := l.Last()
	rep.Record, rep.Confirmed = &last, true
	// Committed: what is left is tidying, which the next run finishes
	// if it fails here. It must not fail the boot (and burn a try of an
	// upgrade that is already the node's).
	if err := n.ClearStaged(); err != nil {
		rep.Note = fmt.Sprintf("committed; removing the staged state failed (the next strata upgrade --confirm or boot finishes it): %v", err)
		return rep, nil
	}
	if err := tidyImages(ctx, b, l); err != nil {
		rep.Note = fmt.Sprintf("committed; tidying the node's state failed: %v", err)
	}
	return rep, nil
}

// tidyImages keeps the stored image manifests the node still needs (the
// image it runs, the line's image) and, through recovery, drops the
// layers and overlay manifests the ledger no longer has in effect.
func tidyImages(ctx context.Context, b nodestate.Backend, l *manifests.Ledger) error {
	n := b.Node()
	if err := n.PruneImages(l.Running().Digest, l.Canonical().Digest); err != nil {
		return err
	}
	return recoverTxn(ctx, b, nil)
}

// FallbackReport says what SettleUpgrade found.
type FallbackReport struct {
	// Failed is the failed record written for an upgrade whose image did
	// not boot to health: the node came back on its old image.
	Failed *manifests.LedgerEntry `json:"failed,omitempty"`
}

// SettleUpgrade runs at boot (strata activate, in the initramfs): when an
// upgrade is staged but the node booted its old image again after the
// upgrade was staged (a later boot, or any boot of a disk staged offline),
// the new image did not reach health in its tries, or was not chosen: the
// ledger gets a failed record naming it, and the staged upgrade goes.
func (h *Node) SettleUpgrade(ctx context.Context, bootID string) (*FallbackReport, error) {
	n, root := h.state(), h.root
	unlock, err := n.Lock(ctx, 0)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ev, err := n.Effective()
	if err != nil {
		return nil, err
	}
	u := ev.Staged
	if u == nil || ev.Trial || (u.BootID != "" && u.BootID == bootID) {
		return &FallbackReport{}, nil
	}
	l := ev.Ledger
	run, last := l.Running(), l.Last()
	if run.Digest == u.Record.Digest {
		// Committed by a confirmation that stopped before it removed
		// the staged state.
		return &FallbackReport{}, n.ClearStaged()
	}
	if manifests.Digest(ev.ImageRaw) != run.Digest {
		return nil, fmt.Errorf("node %s runs neither its image %s nor the staged image %s: %w", root, run.Version, u.Record.Version, ErrDrift)
	}
	rec := manifests.LedgerEntry{
		Action: manifests.LedgerFailed, Line: u.Record.Line, Version: u.Record.Version, Digest: u.Record.Digest,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Slot: u.Record.Slot,
		Error: fmt.Sprintf("upgrade to image %s (root %s, boot entry %s) did not boot to health; the node booted its image %s again", u.Record.Version, u.Record.Slot, u.Entry, run.Version),
		Time:  time.Now().UTC().Format(time.RFC3339),
	}
	// Why, when the initramfs knew: it refused the root (dm-verity).
	if why, err := n.TakeBootRefusal(); err != nil {
		rec.Error += "; its boot refusal note could not be read: " + err.Error()
	} else if why != "" {
		rec.Error += "; its boot was refused: " + why
	}
	if l, err = n.Commit(l, rec); err != nil {
		return nil, err
	}
	f := l.Last()
	if err := n.ClearStaged(); err != nil {
		return nil, err
	}
	return &FallbackReport{Failed: &f}, n.PruneImages(run.Digest, l.Canonical().Digest)
}

// CancelUpgrade removes a staged upgrade from the node's state; the
// caller removes its boot entry first (a trial boot of an image whose
// upgrade is not staged would find a ledger for another image). It
// refuses on a trial boot: the node runs the staged image.
func (h *Node) CancelUpgrade(ctx context.Context, removeEntry func(*manifests.StagedUpgrade) error) (*manifests.StagedUpgrade, error) {
	b, root := h.b, h.root
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := b.Node()
	ev, err := n.Effective()
	if err != nil {
		return nil, err
	}
	u := ev.Staged
	switch {
	case u == nil:
		return nil, fmt.Errorf("node %s: no upgrade is staged: %w", root, ErrUpgrade)
	case ev.Trial:
		return nil, fmt.Errorf("node %s runs the staged image %s (a trial boot): reboot into the old image (or let the trial fail) first: %w", root, u.Record.Version, ErrUpgradeStaged)
	}
	if err := removeEntry(u); err != nil {
		return nil, err
	}
	if err := n.ClearStaged(); err != nil {
		return nil, err
	}
	return u, n.PruneImages(ev.Ledger.Running().Digest, ev.Ledger.Canonical().Digest)
}
