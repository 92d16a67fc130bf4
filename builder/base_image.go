package builder

import (
	"context"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// addImage places another strata image's tree in the layout, owners and
// modes exactly as its manifest lists them. The image's manifest and
// signature are verified first (with trust nil, against the keys the image
// lists itself) and every entry is checked against the manifest while it
// streams. The image's own manifest copy and trusted keys are left out
// (dropFromRootfs): the new image gets its own.
func (l *layout) addImage(ctx context.Context, image string, st *blobs, trust *sign.KeySet) error {
	im, err := repo.LoadImage(image, trust)
	if err != nil {
		return fmt.Errorf("base image: %w", err)
	}
	return WalkImage(ctx, image, im, func(e manifests.Entry, r io.Reader) error {
		if dropFromRootfs(e.Path) {
			return nil
		}
		var src source
		if e.Type == manifests.TypeFile {
			sum, _, err := st.put(r)
			if err != nil {
				return err
			}
			if sum != e.SHA256 {
				return fmt.Errorf("image %s: %s: content does not match the manifest's sha256: %w", image, e.Path, ErrImageMismatch)
			}
			src.host = st.path(sum)
		}
		return l.put(e, src)
	})
}
