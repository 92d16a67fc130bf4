// Package fleet works on many nodes at once: the inventory that lists
// them (YAML, checked strictly, since its names and addresses reach
// command lines) and the fleet status, gathered from each node's agent
// health endpoint, that says which nodes are current, behind, failing,
// owing restarts or unreachable, and never hides one.
package fleet
