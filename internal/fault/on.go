//go:build strata_faults

package fault

const built = true
