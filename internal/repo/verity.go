package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/verity"
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
	d, err := LoadVerityDoc(image, im, trust)
	if err != nil {
		return nil, err
	}
	return d.Verity, nil
}

// VerityDoc is a verified verity record with the bytes it was verified
// from, to be published or embedded as they are, not read again.
type VerityDoc struct {
	Verity   *manifests.Verity
	Raw, Sig []byte
}

// LoadVerityDoc is LoadVerity keeping the record's bytes.
func LoadVerityDoc(image string, im *Image, trust *sign.KeySet) (*VerityDoc, error) {
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
	return &VerityDoc{Verity: v, Raw: raw, Sig: sig}, nil
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

// checkVerity loads the verity record beside image and checks it, and
// the hash tree in the image, before anything of it is published: nil
// for an image without a record, an error for one whose record does not
// verify or whose blocks do not match it.
func checkVerity(ctx context.Context, image string, im *Image, trust *sign.KeySet) (*VerityDoc, error) {
	d, err := LoadVerityDoc(image, im, trust)
	if errors.Is(err, ErrNoVerity) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("publishing %s: %w", image, err)
	}
	if err := VerifyTree(ctx, image, d.Verity); err != nil {
		return nil, fmt.Errorf("publishing %s: %w", image, err)
	}
	return d, nil
}

// VerifyTree reads the image file whole and checks it and its appended
// hash tree against the verity record v, as dm-verity would on reads:
// the error names the first block that does not match.
func VerifyTree(ctx context.Context, image string, v *manifests.Verity) error {
	p, root, err := verity.FromRecord(v)
	if err != nil {
		return err
	}
	f, err := safefile.OpenFollow(image)
	if err != nil {
		return fmt.Errorf("verifying image %s: %w", image, err)
	}
	defer f.Close()
	return verity.VerifyFile(ctx, f, p, root)
}

// putVerity publishes the verity record d (nil: none) as the record of
// rel in st, from the bytes it was verified from.
func putVerity(ctx context.Context, st Putter, rel string, d *VerityDoc) error {
	if d == nil {
		return nil
	}
	vp := VerityPath(rel)
	if err := st.Put(ctx, vp, bytes.NewReader(d.Raw)); err != nil {
		return err
	}
	if d.Sig != nil {
		if err := st.Put(ctx, SigPath(vp), bytes.NewReader(d.Sig)); err != nil {
			return err
		}
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

// BootImagePath is where an image's boot image (a unified kernel image
// signed for Secure Boot that boots it on any node of its line) lies
// beside it: IMAGE.squashfs's .efi.
func BootImagePath(image string) string {
	return strings.TrimSuffix(image, ".squashfs") + ".efi"
}
