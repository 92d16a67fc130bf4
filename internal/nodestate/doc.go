// Package nodestate owns a node's state directory (/var/lib/strata): the ledger,
// the apply lock and the trusted keys and image manifest a node carries.
package nodestate
