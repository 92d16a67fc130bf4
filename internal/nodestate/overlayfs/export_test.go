package overlayfs

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
)

// CountDigests counts the layer images hashed (openLayerImage) until the
// test ends.
func CountDigests(t *testing.T) *atomic.Int64 {
	var n atomic.Int64
	was := digestImage
	digestImage = func(ctx context.Context, f *os.File) (string, int64, error) {
		n.Add(1)
		return was(ctx, f)
	}
	t.Cleanup(func() { digestImage = was })
	return &n
}

// OnStaged runs fn with the path of each layer image Stage writes, once
// it is checked, until the test ends.
func OnStaged(t *testing.T, fn func(path string)) {
	testHookStaged = fn
	t.Cleanup(func() { testHookStaged = nil })
}
