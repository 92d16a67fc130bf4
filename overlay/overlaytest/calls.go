package overlaytest

import (
	"context"

	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/schema"
)

// The one-call forms below open the node at root with the options given
// and run one operation on the handle, returning the open's error as the
// operation's: tests that act on a node once read best with them.

// Apply applies src to the node at root.
func Apply(ctx context.Context, root string, src node.Source, o node.ApplyOptions, no node.Options) (*node.ApplyReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.Apply(ctx, src, o)
}

// Rollback rolls the node at root back to version to ("": one step).
func Rollback(ctx context.Context, root, to string, no node.Options) (*node.RollbackReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.Rollback(ctx, to)
}

// Verify audits the node at root.
func Verify(ctx context.Context, root string, o node.VerifyOptions) (*schema.Audit, error) {
	n, err := node.Open(root, node.Options{})
	if err != nil {
		return nil, err
	}
	return n.Verify(ctx, o)
}

// Status reads the status of the node at root.
func Status(ctx context.Context, root string) (*node.Status, error) {
	n, err := node.Open(root, node.Options{})
	if err != nil {
		return nil, err
	}
	return n.Status(ctx)
}

// Activate stacks the layers of the node at root (run: its runtime
// directory).
func Activate(ctx context.Context, root, run string) (*node.ActivateReport, error) {
	n, err := node.Open(root, node.Options{Run: run})
	if err != nil {
		return nil, err
	}
	return n.Activate(ctx)
}

// SettlePending settles the restart debt of the node at root.
func SettlePending(ctx context.Context, root string, no node.Options) (*node.SettleReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.SettlePending(ctx)
}

// Repair repairs the node at root from src.
func Repair(ctx context.Context, root string, src node.Source, no node.Options) (*node.RepairReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.Repair(ctx, src)
}

// Restart restarts units of the node at root.
func Restart(ctx context.Context, root string, units []string, no node.Options) (*node.RestartReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.Restart(ctx, units)
}

// GC prunes the state of the node at root.
func GC(ctx context.Context, root string, keep int, no node.Options) (*node.GCReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.GC(ctx, keep)
}

// History reads the history of the node at root.
func History(root string) (*node.NodeHistory, error) {
	n, err := node.Open(root, node.Options{})
	if err != nil {
		return nil, err
	}
	return n.History()
}

// Confirm confirms a trial boot of the node at root.
func Confirm(ctx context.Context, root string, health node.HealthCheck, no node.Options) (*node.ConfirmReport, error) {
	n, err := node.Open(root, no)
	if err != nil {
		return nil, err
	}
	return n.Confirm(ctx, health)
}

// SettleUpgrade settles a staged upgrade of the node at root at boot.
func SettleUpgrade(ctx context.Context, root, bootID string) (*node.FallbackReport, error) {
	n, err := node.Open(root, node.Options{})
	if err != nil {
		return nil, err
	}
	return n.SettleUpgrade(ctx, bootID)
}
