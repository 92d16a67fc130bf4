package agent_test

import (
	"fmt"
	"testing"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/internal/nodestate/overlayfs"
	"github.com/strata-dev/strata/node"
)

// Each failure class an operator acts on differently has its own reason.
func TestReason(t *testing.T) {
	for want, err := range map[string]error{
		"layer_refused": fmt.Errorf("applying 1.0.3: %w", overlayfs.ErrLayerRefused),
		"local_edit":    fmt.Errorf("node /: %w", node.ErrLocalEdit),
		"error":         fmt.Errorf("something else"),
	} {
		if got := agent.Reason(err); got != want {
			t.Errorf("Reason(%v) = %s, want %s", err, got, want)
		}
	}
}
