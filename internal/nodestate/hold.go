package nodestate

import "github.com/strata-dev/strata/manifests"

// Held returns the node's hold, nil when it is not held.
func (n Node) Held() (*manifests.Hold, error) {
	return readDoc[manifests.Hold](n, manifests.HoldPath, 4<<10, "the node's hold")
}

// SetHold writes the node's hold (atomically).
func (n Node) SetHold(h *manifests.Hold) error { return writeDoc(n, manifests.HoldPath, h) }

// ClearHold removes the node's hold, if any.
func (n Node) ClearHold() error { return removeDoc(n, manifests.HoldPath, "the node's hold") }
