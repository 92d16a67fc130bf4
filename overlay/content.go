package overlay

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/manifests"
)

// chainContent returns the bytes of file entry e as the chain's head has it:
// from the newest overlay that carries the path, or from the base image.
// It serves analysis of a few files (unit files, binaries), not bulk reads.
func chainContent(ctx context.Context, c *Chain, e manifests.Entry) (io.ReadCloser, error) {
	for i := len(c.Overlays) - 1; i >= 0; i-- {
		a := c.Overlays[i]
		if !carries(a.Manifest, e.Path) {
			continue
		}
		var found []byte
		err := a.Payload(ctx, func(pe manifests.Entry, r io.Reader) error {
			if pe.Path == e.Path && r != nil {
				b, err := io.ReadAll(r)
				found = b
				return err
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(found)), nil
	}
	b, err := squashfs.Cat(ctx, c.Repo.Path(c.Line.Image.File), e.Path)
	if err != nil {
		return nil, err
	}
	if manifests.Digest(b) != manifests.DigestPrefix+e.SHA256 {
		return nil, fmt.Errorf("image %s: %s does not match its manifest: %w", c.Line.Image.File, e.Path, ErrPayload)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func carries(m *manifests.OverlayManifest, p string) bool {
	for _, e := range m.Entries {
		if e.Path == p {
			return true
		}
	}
	return false
}
