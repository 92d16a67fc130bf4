package overlay

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/manifests"
)

// chainContent returns the bytes of file entry e as the chain's head has it:
// from the newest overlay that carries the path, or from the base image.
// It serves analysis of a few files (unit files, binaries), not bulk reads.
func chainContent(ctx context.Context, c *Chain, e manifests.Entry) (io.ReadCloser, error) {
	overlays := c.Overlays
	if len(overlays) == 0 && len(c.Line.Overlays) > 0 {
		// A chain from a head state: open the line's overlays, newest
		// first, as needed. Their signatures are not what vouches for
		// the content here: the bytes must have the digest the head
		// state (bound to the signed index) records.
		return stateContent(ctx, c, e)
	}
	for i := len(overlays) - 1; i >= 0; i-- {
		a := overlays[i]
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

// stateContent finds e's bytes in the newest overlay of the line that
// writes e.Path, else in the image, and checks them against e.SHA256.
func stateContent(ctx context.Context, c *Chain, e manifests.Entry) (io.ReadCloser, error) {
	for i := len(c.Line.Overlays) - 1; i >= 0; i-- {
		a, err := repo.OpenIndexed(ctx, c.Repo, c.Line.Overlays[i], sign.AnyKey())
		if err != nil {
			return nil, err
		}
		if !carries(a.Manifest, e.Path) {
			continue
		}
		var found []byte
		err = a.Payload(ctx, func(pe manifests.Entry, r io.Reader) error {
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
		if manifests.Digest(found) != manifests.DigestPrefix+e.SHA256 {
			return nil, fmt.Errorf("overlay %s: %s is not what the head state says: %w", a.Manifest.Version, e.Path, ErrPayload)
		}
		return io.NopCloser(bytes.NewReader(found)), nil
	}
	c2 := *c
	c2.Line = &manifests.Line{Name: c.Line.Name, Image: c.Line.Image}
	return chainContent(ctx, &c2, e)
}

func carries(m *manifests.OverlayManifest, p string) bool {
	for _, e := range m.Entries {
		if e.Path == p {
			return true
		}
	}
	return false
}
