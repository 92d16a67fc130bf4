// Package dirfs is the node backend for nodes whose root is a writable
// directory tree: a chroot, a container root, a test node.
//
// A change is staged inside the node's state directory (every payload
// file written and checked aside), then carried out under a journal: each
// path is swapped in by rename beneath the root (openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), what it displaced is kept, and one
// syncfs makes it durable. The ledger write is the commit point: after a
// crash, Recover rolls the journal forward if the ledger holds the record
// and back if not. What an apply displaced stays as undo data for a later
// rollback.
package dirfs
