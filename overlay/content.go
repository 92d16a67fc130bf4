package overlay

import (
	"context"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/squashfs"
	"github.com/strata-dev/strata/manifests"
)

// chainContent returns the bytes of file entry e as the chain's head has it:
// from the newest overlay that carries the path, or from the base image.
// A file an overlay ships as a patch is rebuilt from the path's content
// below that overlay, found the same way. It serves analysis of a few
// files (unit files, binaries) and the bases of new patches, not bulk
// reads.
func chainContent(ctx context.Context, c *Chain, e manifests.Entry) ([]byte, error) {
	overlays := len(c.Overlays)
	if overlays == 0 {
		// A chain from a head state: the line's overlays are opened as
		// needed. Their signatures are not what vouches for the content
		// here: the bytes must have the digest the head state (bound to
		// the signed index) records.
		overlays = len(c.Line.Overlays)
	}
	return contentBelow(ctx, c, overlays, e.Path, e.SHA256)
}

// contentBelow returns the content of path, which must have SHA-256 sum,
// in the tree of the chain's image and its first n overlays.
func contentBelow(ctx context.Context, c *Chain, n int, path, sum string) ([]byte, error) {
	for i := n - 1; i >= 0; i-- {
		a, err := chainOverlay(ctx, c, i)
		if err != nil {
			return nil, err
		}
		if !carries(a.Manifest, path) {
			continue
		}
		below := func(ctx context.Context, p, s string) ([]byte, error) { return contentBelow(ctx, c, i, p, s) }
		var found []byte
		err = a.Payload(ctx, below, func(pe manifests.Entry, r io.Reader) error {
			if pe.Path == path && r != nil {
				b, err := io.ReadAll(r)
				found = b
				return err
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if manifests.Digest(found) != manifests.DigestPrefix+sum {
			return nil, fmt.Errorf("overlay %s: /%s is not the content expected at the head: %w", a.Manifest.Version, path, ErrPayload)
		}
		return found, nil
	}
	b, err := squashfs.Cat(ctx, c.Repo.Path(c.Line.Image.File), path)
	if err != nil {
		return nil, err
	}
	if manifests.Digest(b) != manifests.DigestPrefix+sum {
		return nil, fmt.Errorf("image %s: /%s does not match its manifest: %w", c.Line.Image.File, path, ErrPayload)
	}
	return b, nil
}

// chainOverlay returns the chain's i-th overlay: loaded, or opened from
// the line's index for a chain from a head state.
func chainOverlay(ctx context.Context, c *Chain, i int) (*archive.Archive, error) {
	if len(c.Overlays) > 0 {
		return c.Overlays[i], nil
	}
	return repo.OpenIndexed(ctx, c.Repo, c.Line.Overlays[i], sign.AnyKey())
}

func carries(m *manifests.OverlayManifest, p string) bool {
	for _, e := range m.Entries {
		if e.Path == p {
			return true
		}
	}
	return false
}
