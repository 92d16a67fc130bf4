// Package schema holds the documents a node reports to the tools that
// read it: its health (the agent's /health, `strata health --json`), the
// agent's own state, and the configuration files its services claim, with
// how a health answer is signed and checked.
//
// The agent writes these documents and package fleet reads them; both
// import this package, so a fleet client links none of the agent, its
// metrics or the node engine. It depends on manifests and sign only.
package schema
