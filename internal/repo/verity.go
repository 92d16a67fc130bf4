package repo

import (
	"errors"
	"fmt"
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
