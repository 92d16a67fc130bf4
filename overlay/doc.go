// Package overlay creates, reads, verifies and applies overlays, rolls them
// back, audits nodes and repositories, and plans service restarts.
//
// A node is used through its handle: OpenNode opens it once (its state
// directory and the backend that state names, among those registered with
// package internal/nodestate), and the operations on it are the handle's
// methods (Apply, Rollback, Repair, Restart, Status, Verify, Upgrade, ...).
//
// An overlay archive is a compressed tar whose first member is the manifest
// (.strata/overlay.json), whose second is its minisign signature, and whose
// remaining members are the payload, one per manifest entry and in the same
// order. Readers verify the signature before trusting the manifest and check
// every payload member against it while streaming.
//
// Applying to a directory node stages and verifies the whole payload inside
// the node's state directory, then swaps paths in by rename under a
// journal. The ledger write is the commit point: after a crash the next run
// rolls the journal forward if the ledger has the record and back if not.
package overlay
