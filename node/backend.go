package node

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// managedOf reads the managed hierarchies of the node's image.
func managedOf(n nodestate.Node) ([]string, error) {
	raw, err := safefile.Read(n.Path(manifests.ImageManifestPath), 256<<20)
	if err != nil {
		return nil, fmt.Errorf("node %s: reading image manifest: %w", n.Root, err)
	}
	m, err := view.DecodeImage(raw, manifests.Digest(raw))
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
	// Refused is the initramfs's note of a root it refused to boot that
	// no failed upgrade took (a refusal outside a trial boot): reported
	// once, then dropped.
	Refused string `json:"refused,omitempty"`
	// LayerRefused is a layer image that does not match the record of its
	// apply: it is not stacked, nor is any layer above it (Layers lists
	// those stacked), until strata restart --repair rewrites it.
	LayerRefused *schema.LayerRefusal `json:"layer_refused,omitempty"`
	// Warnings are what activation could not do beside stacking (record
	// a refused layer in the ledger).
	Warnings []string `json:"warnings,omitempty"`
}

// Activate builds the overlayfs stacks of the node from its ledger,
// below the runtime directory Options.Run names. On a running node it
// settles an interrupted switch and rebuilds the stacks; offline (a
// mounted disk) it stacks the layers. A boot runs ActivateBoot.
func (h *Node) Activate(ctx context.Context) (*ActivateReport, error) {
	if err := h.activate(ctx); err != nil {
		return nil, err
	}
	ev, err := h.state().Effective()
	if err != nil {
		return nil, err
	}
	rep := &ActivateReport{Root: h.root, Head: ev.Ledger.Last().Head, Layers: []string{}}
	if lr, ok := h.b.(nodestate.LayerRebuilder); ok {
		li, err := lr.LayerIntegrity()
		if err != nil {
			return nil, err
		}
		rep.LayerRefused = li.Refused
		if li.Refused != nil && !ev.Trial {
			// The refusal stands in the stacks whether or not the
			// ledger can take it: a full state partition must not
			// turn a boot without one layer into one without any.
			if err := h.recordRefusal(ctx, li.Refused); err != nil {
				rep.Warnings = append(rep.Warnings, err.Error())
			}
		}
	}
	for _, e := range ev.Ledger.Applied() {
		if rep.LayerRefused != nil && e.Version == rep.LayerRefused.Version {
			break
		}
		rep.Layers = append(rep.Layers, e.Version)
	}
	if ev.Trial {
		rep.Trial = &manifests.Ref{Version: ev.Staged.Record.Version, Digest: ev.Staged.Record.Digest}
	}
	return rep, nil
}

// recordRefusal writes a refused record of the layer image activation
// refused to the ledger, so node history keeps it after the repair: once
// for each refusal, not again at each activation while the same one
// stands (no change of the layers since a record of it). It writes
// nothing on an offline disk mounted read-only, nor on a trial boot (the
// image the node may fall back to would read the ledger with an older
// strata). The record is validated before it is written.
func (h *Node) recordRefusal(ctx context.Context, r *schema.LayerRefusal) error {
	n := h.state()
	if n.ReadOnly() {
		return nil
	}
	unlock, err := n.Lock(ctx, 0)
	if err != nil {
		return fmt.Errorf("recording the refused layer %s in the ledger: %w", r.Version, err)
	}
	defer unlock()
	l, err := n.ReadLedger()
	if err != nil {
		return fmt.Errorf("recording the refused layer %s in the ledger: %w", r.Version, err)
	}
	for i := len(l.Entries) - 1; i > 0; i-- {
		e := l.Entries[i]
		if e.Action == manifests.LedgerRefused && e.Version == r.Version && e.Error == manifests.RecordText(r.Error) {
			return nil
		}
		if e.Action != manifests.LedgerRefused && e.Action != manifests.LedgerFailed && e.Action != manifests.LedgerRestart {
			break // the layers changed since
		}
	}
	last := l.Last()
	rec := manifests.LedgerEntry{Action: manifests.LedgerRefused, Line: last.Line, Version: r.Version,
		Image: last.Image, Head: last.Head, TreeDigest: last.TreeDigest, Error: manifests.RecordText(r.Error),
		Time: time.Now().UTC().Format(time.RFC3339)}
	for _, e := range l.Applied() {
		if e.Version == r.Version {
			rec.Digest = e.Digest
		}
	}
	if rec.Digest == "" {
		return fmt.Errorf("recording the refused layer %s in the ledger: no applied overlay has that version", r.Version)
	}
	if _, err := n.Commit(l, rec); err != nil {
		return fmt.Errorf("recording the refused layer %s in the ledger: %w", r.Version, err)
	}
	return nil
}

// ActivateBoot is Activate at boot (an initramfs runs it before PID 1
// starts): it also settles a staged upgrade the node did not boot into
// (SettleUpgrade, with the running kernel's boot id), recording it as
// failed.
func (h *Node) ActivateBoot(ctx context.Context) (*ActivateReport, error) {
	rep, err := h.Activate(ctx)
	if err != nil {
		return nil, err
	}
	bootID, err := nodestate.BootID()
	if err != nil {
		return rep, err
	}
	fb, err := h.SettleUpgrade(ctx, bootID)
	if err != nil {
		return rep, err
	}
	rep.FailedUpgrade = fb.Failed
	if why, err := h.state().TakeBootRefusal(); err != nil {
		rep.Refused = "a note of a refused root could not be read: " + err.Error()
	} else {
		rep.Refused = why
	}
	return rep, nil
}

// activate stacks the layers, under the node's lock (taken at once: at
// boot nothing else runs).
func (h *Node) activate(ctx context.Context) error {
	b, ok := h.b.(nodestate.Activator)
	if !ok {
		name, _ := h.Backend()
		return fmt.Errorf("activating %s: the node's backend is %s, which stacks no layers at boot (overlayfs does): %w", h.root, name, ErrDrift)
	}
	n := b.Node()
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
