//go:build !strata_faults

package fault

// built is set in binaries built with the strata_faults tag, which live
// node tests run inside their nodes; a normal strata never crashes on
// purpose.
const built = false
