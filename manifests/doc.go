// Package manifests defines strata's on-disk schemas: tree entries, image
// and overlay manifests, the repository index, the node ledger and the
// service catalog. It also owns their validation, canonical encoding and
// the semantic-version rules of a line.
//
// The package is pure: it performs no I/O beyond the readers and writers
// handed to it, and it imports no other strata package.
package manifests
