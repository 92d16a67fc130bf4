// Package fault lets crash tests stop a strata process at a named point,
// as a power loss would. Outside test binaries every point is a no-op.
package fault
