package manifests

import (
	"fmt"
	"time"
)

// KindHold marks a node's hold (HoldPath).
const KindHold = "hold"

// HoldPath is where a node keeps its hold, below the node root.
const HoldPath = StateDir + "/hold.json"

// Hold keeps a node at a head: nothing moves it (an apply refuses, its
// agent leaves it, a rollout skips it) until it is released. A rollback
// holds the node where it took it, so that the next publication does not
// undo the operator's decision.
type Hold struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
	// Head is where the node is held.
	Head Ref `json:"head"`
	// Reason says why, in the operator's words or the command's.
	Reason string `json:"reason"`
	// Since is when (RFC 3339).
	Since string `json:"since"`
}

// Validate checks a hold read from node state.
func (h *Hold) Validate() error {
	if h.Schema != Schema || h.Kind != KindHold {
		return fmt.Errorf("%w: not a hold (schema %d, kind %q)", ErrInvalid, h.Schema, h.Kind)
	}
	if _, err := ParseVersion(h.Head.Version); err != nil {
		return fmt.Errorf("%w: hold: %v", ErrInvalid, err)
	}
	if !ValidDigest(h.Head.Digest) {
		return fmt.Errorf("%w: hold: digest %q", ErrInvalid, clip(h.Head.Digest))
	}
	if err := ValidReason("hold", h.Reason); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, h.Since); err != nil {
		return fmt.Errorf("%w: hold: since %q", ErrInvalid, clip(h.Since))
	}
	return nil
}
