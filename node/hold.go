package node

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// ErrHeld reports a node that is held (Hold): nothing moves it until it
// is released.
var ErrHeld = manifests.Rejection("the node is held")

// Hold holds the node at its head, for reason: an apply refuses, its
// agent leaves it where it is and a rollout skips it, each saying why,
// until Release. Holding a held node replaces its reason.
func (h *Node) Hold(ctx context.Context, reason string) (*manifests.Hold, error) {
	if err := manifests.ValidReason("the hold's reason", reason); err != nil {
		return nil, err
	}
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return holdAt(h.b.Node(), reason)
}

// holdAt holds the node (locked by the caller) at its head.
func holdAt(n nodestate.Node, reason string) (*manifests.Hold, error) {
	v, err := view.Load(n)
	if err != nil {
		return nil, err
	}
	hold := &manifests.Hold{Schema: manifests.Schema, Kind: manifests.KindHold, Head: v.Head(), Reason: reason,
		Since: time.Now().UTC().Format(time.RFC3339)}
	if err := n.SetHold(hold); err != nil {
		return nil, err
	}
	return hold, nil
}

// Release lets a held node move again and returns the hold it had (nil
// when it was not held).
func (h *Node) Release(ctx context.Context) (*manifests.Hold, error) {
	unlock, err := h.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := h.b.Node()
	hold, err := n.Held()
	if err != nil || hold == nil {
		return nil, err
	}
	return hold, n.ClearHold()
}

// refuseHeld refuses op on a held node, naming the hold and the way out.
func refuseHeld(n nodestate.Node, op string) error {
	hold, err := n.Held()
	if err != nil || hold == nil {
		return err
	}
	return fmt.Errorf("node %s is held at %s since %s (%s): %s waits until strata release --root %s: %w",
		n.Root, hold.Head.Version, hold.Since, hold.Reason, op, n.Root, ErrHeld)
}
