package configedit

import (
	"context"
	"sort"

	"github.com/strata-dev/strata/overlay"
)

// Writer is the element of a line that last wrote a path as of a
// version: the overlay (or the line's image) whose tree gave the path the
// content it has there.
type Writer struct {
	Version string `json:"version"`
	// Image is set when the path has the image's content: no overlay of
	// the line wrote it.
	Image bool `json:"image,omitempty"`
	// Signer is the id of the key that signed its manifest, and Verified
	// whether that signature verified against the keys the line trusts
	// at the version read (a key rotated out since cannot vouch for it
	// here; the index that lists the overlay still does).
	Signer   string `json:"signer"`
	Verified bool   `json:"signature_verified"`
	// Created is when it was published (RFC 3339).
	Created string `json:"created"`
}

// lastWriter finds, walking the chain back from its head, the element
// that last wrote tree path rel.
func lastWriter(ctx context.Context, c *overlay.Chain, rel string) (*Writer, error) {
	for i := c.Len() - 1; i >= 0; i-- {
		a, err := c.OverlayAt(ctx, i)
		if err != nil {
			return nil, err
		}
		es := a.Manifest.Entries
		k := sort.Search(len(es), func(j int) bool { return es[j].Path >= rel })
		if k == len(es) || es[k].Path != rel {
			continue
		}
		w := &Writer{Version: a.Manifest.Version, Signer: a.KeyID, Created: a.Manifest.Created}
		if c.Keys != nil {
			if id, err := c.Keys.Verify(a.Raw, a.Sig); err == nil {
				w.Signer, w.Verified = id, true
			}
		}
		return w, nil
	}
	im := c.Image
	return &Writer{Version: im.Manifest.Version, Image: true, Signer: im.KeyID, Verified: true, Created: im.Manifest.Created}, nil
}

// LastChange returns the content of the file at absolute image path p as
// of version (empty: the head) of line, the version read, and the element
// of the line that last wrote it (Get, and who wrote it).
func LastChange(ctx context.Context, repoDir, line, p, version string) ([]byte, string, *Writer, error) {
	b, at, c, rel, err := get(ctx, repoDir, line, p, version)
	if err != nil {
		return nil, at, nil, err
	}
	w, err := lastWriter(ctx, c, rel)
	if err != nil {
		return nil, at, nil, err
	}
	return b, at, w, nil
}
