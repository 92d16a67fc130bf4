package overlaytest

import (
	"context"

	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

// The one-call forms below open the node at root with the options given
// and run one operation on the handle, returning the open's error as the
// operation's: tests that act on a node once read best with them.

// Apply applies src to the node at root.
func Apply(ctx context.Context, root string, src overlay.Source, o overlay.ApplyOptions, no overlay.NodeOptions) (*overlay.ApplyReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.Apply(ctx, src, o)
}

// Rollback rolls the node at root back to version to ("": one step).
func Rollback(ctx context.Context, root, to string, no overlay.NodeOptions) (*overlay.RollbackReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.Rollback(ctx, to)
}

// Verify audits the node at root.
func Verify(ctx context.Context, root string, o overlay.VerifyOptions) (*schema.Audit, error) {
	n, err := overlay.OpenNode(root, overlay.NodeOptions{})
	if err != nil {
		return nil, err
	}
	return n.Verify(ctx, o)
}

// Status reads the status of the node at root.
func Status(ctx context.Context, root string) (*overlay.Status, error) {
	n, err := overlay.OpenNode(root, overlay.NodeOptions{})
	if err != nil {
		return nil, err
	}
	return n.Status(ctx)
}

// Activate stacks the layers of the node at root (run: its runtime
// directory).
func Activate(ctx context.Context, root, run string) (*overlay.ActivateReport, error) {
	n, err := overlay.OpenNode(root, overlay.NodeOptions{Run: run})
	if err != nil {
		return nil, err
	}
	return n.Activate(ctx)
}

// SettlePending settles the restart debt of the node at root.
func SettlePending(ctx context.Context, root string, no overlay.NodeOptions) (*overlay.SettleReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.SettlePending(ctx)
}

// Repair repairs the node at root from src.
func Repair(ctx context.Context, root string, src overlay.Source, no overlay.NodeOptions) (*overlay.RepairReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.Repair(ctx, src)
}

// Restart restarts units of the node at root.
func Restart(ctx context.Context, root string, units []string, no overlay.NodeOptions) (*overlay.RestartReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.Restart(ctx, units)
}

// GC prunes the state of the node at root.
func GC(ctx context.Context, root string, keep int, no overlay.NodeOptions) (*overlay.GCReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.GC(ctx, keep)
}

// History reads the history of the node at root.
func History(root string) (*overlay.NodeHistory, error) {
	n, err := overlay.OpenNode(root, overlay.NodeOptions{})
	if err != nil {
		return nil, err
	}
	return n.History()
}

// Confirm confirms a trial boot of the node at root.
func Confirm(ctx context.Context, root string, health overlay.HealthCheck, no overlay.NodeOptions) (*overlay.ConfirmReport, error) {
	n, err := overlay.OpenNode(root, no)
	if err != nil {
		return nil, err
	}
	return n.Confirm(ctx, health)
}

// SettleUpgrade settles a staged upgrade of the node at root at boot.
func SettleUpgrade(ctx context.Context, root, bootID string) (*overlay.FallbackReport, error) {
	n, err := overlay.OpenNode(root, overlay.NodeOptions{})
	if err != nil {
		return nil, err
	}
	return n.SettleUpgrade(ctx, bootID)
}
