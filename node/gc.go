package node

import (
	"context"
	"fmt"

	"github.com/strata-dev/strata/manifests"
)

// pruner is a backend that keeps data for rolling back (the directory
// backend's undo data) and can drop it for older overlays. Layers of an
// overlayfs node are its tree, so that backend has nothing to drop.
type pruner interface {
	Prune(l *manifests.Ledger, keep int) ([]string, error)
}

// GCReport says what GC removed.
type GCReport struct {
	Root string `json:"root"`
	// Keep is how many of the newest overlays in effect can still be
	// rolled back.
	Keep int `json:"keep"`
	// Undo lists the overlays whose undo data went: rollback stops
	// before them.
	Undo []string `json:"undo"`
	// Notes say what recovery did first (temporary files of interrupted
	// writes it removed).
	Notes []string `json:"notes,omitempty"`
}

// GC prunes the node's state under its lock: the undo data of all but the
// newest keep overlays in effect (rollback then reaches those only), and
// whatever no overlay in effect owns (stored manifests, undo data, layers
// left by a crash or a rollback). A node's recovery runs first, so an
// interrupted change is settled, never pruned.
func (h *Node) GC(ctx context.Context, keep int) (*GCReport, error) {
	if keep < 0 {
		return nil, fmt.Errorf("gc: keep %d: %w", keep, manifests.ErrInvalid)
	}
	var notes []string
	b, root := h.b, h.root
	unlock, err := h.lockNoting(ctx, func(s string) { notes = append(notes, s) })
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := refuseTrial(b.Node(), "gc"); err != nil {
		return nil, err
	}
	n := b.Node()
	l, err := n.ReadLedger()
	if err != nil {
		return nil, err
	}
	rep := &GCReport{Root: root, Keep: keep, Undo: []string{}, Notes: notes}
	if p, ok := b.(pruner); ok {
		gone, err := p.Prune(l, keep)
		rep.Undo = append(rep.Undo, gone...)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}
