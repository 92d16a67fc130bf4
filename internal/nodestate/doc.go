// Package nodestate owns a node's state directory (/var/lib/strata): the
// ledger (and its one writer, Node.Commit), the apply lock, and the
// trusted keys and image manifest a node carries. It also defines what a
// node backend is (Backend, with the optional Activator and
// LayerRebuilder) and the registry backends join by name
// (RegisterBackend, OpenBackend); the backends themselves are its
// subpackages dirfs and overlayfs.
package nodestate
