// Package node is strata's node engine: it applies overlays to a node
// strictly in order, restarts or reloads only the services they touch and
// takes a change back when they fail, rolls back, repairs, settles
// restart debt, stacks layers at boot, stages and confirms whole-image
// upgrades, and audits the node, all recorded in the node's ledger.
//
// A node is used through its handle: Open opens it once (its state
// directory and the backend that state names, among those registered
// with package internal/nodestate), and the operations are the handle's
// methods. One that changes the node takes the node's lock for its own
// duration and settles first whatever a crash left.
//
// Applying verifies every overlay before the node changes: the index
// against the node's keys and freshness, each archive's signature, the
// sequence (no gap, no reorder, no fork), then each payload member as the
// backend stages it. The ledger write is the commit point: after a crash
// the next run rolls the backend's journal forward if the ledger has the
// record and back if not.
//
// Overlays are made by package overlay (the publisher); this package does
// not link it, nor the squashfs tools.
package node
