package overlay

import (
	"context"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/node/dirfs"
	"github.com/strata-dev/strata/manifests"
)

// Backend is the node side of apply and rollback: it owns how the node's
// tree changes and what a crash leaves behind. The engine here keeps what
// is format and policy: opening and verifying overlays, the sequence, the
// expected trees, restart plans and which records the ledger gets.
type Backend interface {
	// Node returns the node whose tree the backend changes.
	Node() node.Node
	// Interrupted describes what a crash left unsettled ("" for nothing),
	// changing nothing.
	Interrupted() (string, error)
	// Recover settles what a crash left, so the tree is ledger l's head;
	// it returns the record of a change it took back after that change had
	// reached the tree (its services may have seen it).
	Recover(ctx context.Context, l *manifests.Ledger) (*manifests.LedgerEntry, error)
	// Check refuses an overlay the node's tree cannot take safely.
	Check(m *manifests.OverlayManifest) error
	// Stage prepares an overlay's change aside.
	Stage(ctx context.Context, ch *node.Change) (node.Txn, error)
	// StageRevert prepares taking back the last applied overlay.
	StageRevert(ctx context.Context, ch *node.Change) (node.Txn, error)
	// Scan lists the node's current tree, without strata's state.
	Scan(ctx context.Context) ([]manifests.Entry, error)
}

var _ Backend = (*dirfs.Backend)(nil)

// openBackend returns the backend of the node at root.
func openBackend(root string) (Backend, error) {
	n := node.Node{Root: root}
	return dirfs.New(n), nil
}
