// Package restarter holds the node engine's restarters, which carry out
// restart plans on a node's service manager (node.Restarter), and the
// health check of a trial boot (BootHealth).
//
// Systemd resolves each plan against the running manager first (package
// internal/systemd: only active units act, templates become their
// instances, units that cannot restart safely are deferred to the next
// boot), then requires the units that acted to be active and their
// declared check commands, run in a sandbox rooted at the node, to pass.
// Exec runs a command template per action, as recorded, for service
// managers strata does not drive itself. The engine (package node) knows
// only the interface, as it knows only nodestate.Backend and not the
// backends.
package restarter
