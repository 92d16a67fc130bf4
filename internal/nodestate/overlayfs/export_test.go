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

// OnStaged runs fn, until the test ends, each time Stage has written,
// checked and kept a layer image: with the image's path, and a function
// that opens it as a mount would (fresh) or as the audit does (not
// fresh), returning the check's error.
func OnStaged(t *testing.T, fn func(path string, open func(fresh bool) error)) {
	testHookStaged = func(b *Backend, v string) {
		b.mu.Lock()
		li := b.written[v].li
		b.mu.Unlock()
		fn(b.newLayerFile(v), func(fresh bool) error {
			f, err := b.openLayerImage(context.Background(), layerRef{Version: v, Image: &li, staged: true}, fresh)
			if err == nil {
				f.Close()
			}
			return err
		})
	}
	t.Cleanup(func() { testHookStaged = nil })
}
