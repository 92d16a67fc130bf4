package builder

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// ErrImageExists reports a build whose output would replace a different
// image of the same line and version: one version names one content.
var ErrImageExists = manifests.Rejection("a different image of this line and version exists")

// checkOverwrite refuses to write the image img with manifest raw over an
// image that is there already with another manifest (or none): a
// reproducible rebuild, whose manifest is byte for byte the same, may
// write it again.
func checkOverwrite(img string, raw []byte) error {
	if _, err := os.Lstat(img); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("building %s: %w", img, err)
	}
	old, err := safefile.Read(repo.ManifestPath(img), manifests.MaxManifestSize)
	if err != nil {
		return fmt.Errorf("%s exists and its manifest cannot be read (%v); remove it or raise the recipe's version: %w", img, err, ErrImageExists)
	}
	if !bytes.Equal(old, raw) {
		return fmt.Errorf("%s exists with other content (manifest %s; this build's is %s): raise the recipe's version, or remove the old image if it was never published: %w",
			img, manifests.Digest(old), manifests.Digest(raw), ErrImageExists)
	}
	return nil
}
