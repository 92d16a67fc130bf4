// Package fault lets crash tests stop a strata process at a named point,
// as a power loss would. Points act only in test binaries and in strata
// binaries built with the strata_faults build tag (which the live-node
// tests put inside their nodes); in strata itself every point is a no-op.
package fault
