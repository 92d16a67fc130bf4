// Package scratch makes the temporary working directories strata's
// commands use (an offline disk's mount points, an upgrade's copy, a
// staged tree to validate) so that a later run can clean up after one
// that was killed: each is named strata-KIND-*, and holds a lock file
// locked for as long as the directory is in use. Sweep removes those that
// are old enough, whose lock nobody holds.
package scratch
