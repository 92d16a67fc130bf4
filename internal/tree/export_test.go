package tree

import (
	"context"
	"hash"
	"testing"
)

// SetScanHashing makes ScanContext use n hashers and hash each file with
// fn until t ends.
func SetScanHashing(t testing.TB, n int, fn func(ctx context.Context, p string, h hash.Hash, buf []byte) (string, int64, error)) {
	oldN, oldFn := scanHashers, scanHash
	scanHashers, scanHash = func() int { return n }, fn
	t.Cleanup(func() { scanHashers, scanHash = oldN, oldFn })
}

// HashInto is hashInto, for a test's replacement of it to fall back on.
var HashInto = hashInto
