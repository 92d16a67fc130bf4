package overlay

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/manifests"
)

// Content returns the bytes of file entry e as chain c has it at its last
// element (see LoadChain; a chain from a head state works too), checked
// against e's SHA-256.
func Content(ctx context.Context, c *Chain, e manifests.Entry) ([]byte, error) {
	if e.Type != manifests.TypeFile {
		return nil, fmt.Errorf("reading /%s: a %s, not a file", e.Path, e.Type)
	}
	return chainContent(ctx, c, e)
}

// chainContent returns the bytes of file entry e as the chain's head has it:
// from the newest overlay that carries the path, or from the base image
// (for a chain from a head state, the bytes must have the digest the head
// state records: that, not the overlays' signatures, vouches for them).
// A file an overlay ships as a patch is rebuilt from the path's content
// below that overlay, found the same way. It serves analysis of a few
// files (unit files, binaries) and the bases of new patches, not bulk
// reads.
func chainContent(ctx context.Context, c *Chain, e manifests.Entry) ([]byte, error) {
	return contentBelow(ctx, c, c.Len(), e.Path, e.SHA256, -1)
}

// errPatchChain reports a file whose content at the head is more patches
// deep than a caller's limit.
var errPatchChain = errors.New("the file is rebuilt through too many patches")

// contentBelow returns the content of path, which must have SHA-256 sum,
// in the tree of the chain's image and its first n overlays. When depth
// is not negative, rebuilding it through more than depth patches stops
// with errPatchChain.
func contentBelow(ctx context.Context, c *Chain, n int, path, sum string, depth int) ([]byte, error) {
	for i := n - 1; i >= 0; i-- {
		a, err := c.OverlayAt(ctx, i)
		if err != nil {
			return nil, err
		}
		if !a.Manifest.Carries(path) {
			continue
		}
		if _, patched := a.Manifest.PatchFor(path); patched && depth == 0 {
			return nil, errPatchChain
		}
		below := func(ctx context.Context, p, s string) ([]byte, error) { return contentBelow(ctx, c, i, p, s, depth-1) }
		found, err := a.File(ctx, below, path)
		if err != nil {
			return nil, err
		}
		if manifests.Digest(found) != manifests.DigestPrefix+sum {
			return nil, fmt.Errorf("overlay %s: /%s is not the content the tree has there (sha256 %.12s): %w", a.Manifest.Version, path, sum, ErrPayload)
		}
		return found, nil
	}
	b, err := imagefile.Cat(ctx, c.Repo.Path(c.Line.Image.File), path)
	if err != nil {
		return nil, err
	}
	if manifests.Digest(b) != manifests.DigestPrefix+sum {
		return nil, fmt.Errorf("image %s: /%s does not match its manifest: %w", c.Line.Image.File, path, ErrPayload)
	}
	return b, nil
}
