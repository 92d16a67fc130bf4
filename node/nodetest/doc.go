// Package nodetest is the conformance suite every node backend passes
// unchanged (in the manner of restic's backend test suite): apply, a
// no-op re-apply, a refused gap that leaves the node untouched, exact
// rollback, a crash at every fault point the backend has (between and
// inside its steps), refused hostile input, and the file-by-file audit
// finding tampering. A backend's tests call Run with a Factory that makes
// a node of that backend from an image.
package nodetest
