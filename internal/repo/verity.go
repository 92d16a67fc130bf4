package repo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// ErrNoVerity reports an image without a verity record (built before
// strata wrote them, or with the record removed).
var ErrNoVerity = manifests.Rejection("image has no verity record")

// ErrVerityMismatch reports a verity record that names another image.
var ErrVerityMismatch = manifests.Rejection("verity record is for another image")

// VerityPath returns the verity record's path that belongs to a squashfs
// image: "x.squashfs" becomes "x.verity.json".
func VerityPath(image string) string {
	return strings.TrimSuffix(image, ".squashfs") + ".verity.json"
}

// LoadVerity reads the verity record and signature beside image, whose
// manifest im was loaded and verified, and verifies the record: valid,
// signed by a key of trust (nil: the keys the image lists) with the
// record's own trusted comment, and naming im's line, version and digest.
// A missing record is ErrNoVerity.
func LoadVerity(image string, im *Image, trust *sign.KeySet) (*manifests.Verity, error) {
	vp := VerityPath(image)
	raw, err := safefile.Read(vp, manifests.MaxManifestSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image %s: %w (%s)", image, ErrNoVerity, vp)
	}
	if err != nil {
		return nil, fmt.Errorf("loading verity record %s: %w", vp, err)
	}
	sig, err := safefile.Read(SigPath(vp), sign.MaxSignatureSize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("loading verity record %s: %w", vp, err)
	}
	v, err := ParseVerity(raw, sig, im, trust)
	if err != nil {
		return nil, fmt.Errorf("verity record %s: %w", vp, err)
	}
	return v, nil
}

// ParseVerity is LoadVerity for a record given as bytes.
func ParseVerity(raw, sig []byte, im *Image, trust *sign.KeySet) (*manifests.Verity, error) {
	var v manifests.Verity
	if err := manifests.Decode(raw, &v); err != nil {
		return nil, err
	}
	if err := v.Validate(); err != nil {
		return nil, err
	}
	m := im.Manifest
	if v.Line != m.Line || v.Version != m.Version || v.Image != im.Digest {
		return nil, fmt.Errorf("%w: the record is for %s-%s (image %s), not %s-%s (%s)", ErrVerityMismatch, v.Line, v.Version, v.Image, m.Line, m.Version, im.Digest)
	}
	if trust == nil {
		ks, err := im.Trust()
		if err != nil {
			return nil, err
		}
		trust = ks
	}
	if _, err := trust.VerifyFor(raw, sig, sign.VerityComment(v.Line, v.Version)); err != nil {
		return nil, err
	}
	return &v, nil
}

// checkVerity refuses an image whose verity record is there but does not
// verify against trust, before anything of it is published.
func checkVerity(image string, im *Image, trust *sign.KeySet) error {
	if _, err := LoadVerity(image, im, trust); err != nil && !errors.Is(err, ErrNoVerity) {
		return fmt.Errorf("publishing %s: %w", image, err)
	}
	return nil
}

// putVerity publishes the verity record beside image (whose manifest im
// was verified) as the record of rel in st, after checking it against
// trust. An image without a record publishes none; a record that does not
// verify is an error, and nothing is written.
func putVerity(ctx context.Context, st Putter, rel, image string, im *Image, trust *sign.KeySet) error {
	if _, err := LoadVerity(image, im, trust); errors.Is(err, ErrNoVerity) {
		return nil
	} else if err != nil {
		return fmt.Errorf("publishing %s: %w", image, err)
	}
	vp := VerityPath(rel)
	if _, _, err := putFile(ctx, st, vp, VerityPath(image)); err != nil {
		return err
	}
	if _, _, err := putFile(ctx, st, SigPath(vp), SigPath(VerityPath(image))); err != nil {
		return err
	}
	return nil
}

// fetchVerity copies the verity record of the repository image rel (and
// its signature) beside dst, once it verifies against im, which the
// caller checked against the index. An image with no record in the
// repository gets none.
func fetchVerity(ctx context.Context, st Store, rel, dst string, im *Image) error {
	vp := VerityPath(rel)
	raw, sig, err := readDoc(ctx, st, vp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fetching %s: %w", vp, err)
	}
	if _, err := ParseVerity(raw, sig, im, nil); err != nil {
		return fmt.Errorf("fetching %s: %w", vp, err)
	}
	if err := os.WriteFile(VerityPath(dst), raw, 0o644); err != nil {
		return fmt.Errorf("fetching image: %w", err)
	}
	if sig != nil {
		if err := os.WriteFile(SigPath(VerityPath(dst)), sig, 0o644); err != nil {
			return fmt.Errorf("fetching image: %w", err)
		}
	}
	return nil
}
