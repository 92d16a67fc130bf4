package overlay

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/strata-dev/strata/internal/layer"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// layerRecord writes m's layer image (package layer) to a temporary file,
// from the full contents open gives and next, the tree after m, and
// returns the record of it that m carries: every overlayfs node that
// applies m writes these bytes and checks its own image against the
// record the publisher signed.
func layerRecord(ctx context.Context, m *manifests.OverlayManifest, next tree.State, open tree.Opener) (*manifests.LayerImage, error) {
	f, err := os.CreateTemp("", "strata-layer-*.erofs")
	if err != nil {
		return nil, fmt.Errorf("writing the layer image: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	payload := func(ctx context.Context, fn func(manifests.Entry, io.Reader) error) error {
		for _, e := range m.Entries {
			if e.Type != manifests.TypeFile {
				continue
			}
			rc, err := open(e)
			if err != nil {
				return err
			}
			err = fn(e, rc)
			if cerr := rc.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return layer.Write(ctx, f, m, next, payload)
}
