// Package view reads what a node's state directory says about the node,
// verified against its ledger: the image it runs, the manifests of the
// overlays in effect, a staged upgrade, and the trees they fold into. The
// node engine (package node) and its audits (node/internal/audit) start
// every operation from a View; nothing here changes the node.
package view
