// Package storetest is the conformance suite every repo.Store passes, in
// the manner of restic's backend test suite: one set of tests, run by each
// implementation's own test with a fixture that can place members in it.
package storetest
