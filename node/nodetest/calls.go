package nodetest

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
	return with(root, no, func(n *node.Node) (*node.ApplyReport, error) { return n.Apply(ctx, src, o) })
}

// Rollback rolls the node at root back to version to ("": one step).
func Rollback(ctx context.Context, root, to string, no node.Options) (*node.RollbackReport, error) {
	return with(root, no, func(n *node.Node) (*node.RollbackReport, error) { return n.Rollback(ctx, to) })
}

// Verify audits the node at root.
func Verify(ctx context.Context, root string, o node.VerifyOptions) (*schema.Audit, error) {
	return with(root, node.Options{}, func(n *node.Node) (*schema.Audit, error) { return n.Verify(ctx, o) })
}

// Status reads the status of the node at root.
func Status(ctx context.Context, root string) (*node.Status, error) {
	return with(root, node.Options{}, func(n *node.Node) (*node.Status, error) { return n.Status(ctx) })
}

// Activate stacks the layers of the node at root (run: its runtime
// directory).
func Activate(ctx context.Context, root, run string) (*node.ActivateReport, error) {
	return with(root, node.Options{Run: run}, func(n *node.Node) (*node.ActivateReport, error) { return n.Activate(ctx) })
}

// SettlePending settles the restart debt of the node at root.
func SettlePending(ctx context.Context, root string, no node.Options) (*node.SettleReport, error) {
	return with(root, no, func(n *node.Node) (*node.SettleReport, error) { return n.SettlePending(ctx) })
}

// Repair repairs the node at root from src.
func Repair(ctx context.Context, root string, src node.Source, no node.Options) (*node.RepairReport, error) {
	return with(root, no, func(n *node.Node) (*node.RepairReport, error) { return n.Repair(ctx, src) })
}

// Restart restarts units of the node at root.
func Restart(ctx context.Context, root string, units []string, no node.Options) (*node.RestartReport, error) {
	return with(root, no, func(n *node.Node) (*node.RestartReport, error) { return n.Restart(ctx, units) })
}

// GC prunes the state of the node at root.
func GC(ctx context.Context, root string, keep int, no node.Options) (*node.GCReport, error) {
	return with(root, no, func(n *node.Node) (*node.GCReport, error) { return n.GC(ctx, keep) })
}

// History reads the history of the node at root.
func History(root string) (*node.NodeHistory, error) {
	return with(root, node.Options{}, func(n *node.Node) (*node.NodeHistory, error) { return n.History() })
}

// Confirm confirms a trial boot of the node at root.
func Confirm(ctx context.Context, root string, health node.HealthCheck, no node.Options) (*node.ConfirmReport, error) {
	return with(root, no, func(n *node.Node) (*node.ConfirmReport, error) { return n.Confirm(ctx, health) })
}

// SettleUpgrade settles a staged upgrade of the node at root at boot.
func SettleUpgrade(ctx context.Context, root, bootID string) (*node.FallbackReport, error) {
	return with(root, node.Options{}, func(n *node.Node) (*node.FallbackReport, error) { return n.SettleUpgrade(ctx, bootID) })
}

// with opens the node at root with o and runs fn on the handle; an error
// opening it is the operation's.
func with[T any](root string, o node.Options, fn func(*node.Node) (T, error)) (T, error) {
	n, err := node.Open(root, o)
	if err != nil {
		var zero T
		return zero, err
	}
	return fn(n)
}
