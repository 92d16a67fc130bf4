// Package agent is the pull agent a node runs (strata agent): it polls
// its line's repository with conditional requests, applies pending
// overlays in order through the node's backend (validation, restarts,
// health checks and the switch back on failure are Apply's), backs off
// exponentially on failure, never skips a version, and serves the node's
// health as JSON and its metrics for Prometheus.
//
// A missing or invalid configuration never stops the agent: it keeps
// serving health and metrics, reports "config invalid", and recovers by
// itself once the file is fixed. Nudges make it poll at once; only a nudge
// signed by a key the node trusts is taken (see Nudge).
package agent
