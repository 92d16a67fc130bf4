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

// ErrNoManifest reports an image without its manifest or signature (of
// the manifests.ErrRejected class).
var ErrNoManifest = manifests.Rejection("repo: image manifest missing")

// ManifestPath returns the manifest path that belongs to a squashfs image:
// "x.squashfs" becomes "x.image.json".
func ManifestPath(image string) string {
	return strings.TrimSuffix(image, ".squashfs") + ".image.json"
}

// SigPath returns the detached signature path of a document.
func SigPath(doc string) string { return doc + ".minisig" }

// Image is a verified image manifest with its raw bytes.
type Image struct {
	Manifest *manifests.ImageManifest
	Raw      []byte
	// Digest is the digest of Raw, the image's identity in a line.
	Digest string
	// KeyID is the key that signed the manifest.
	KeyID string
}

// LoadImage reads the manifest and signature beside a squashfs image,
// validates the manifest and verifies its signature. With a nil trust set
// the image is checked against the keys it lists itself, which proves
// integrity but not origin; pass the operator's keys to prove origin.
func LoadImage(image string, trust *sign.KeySet) (*Image, error) {
	mp := ManifestPath(image)
	raw, err := safefile.Read(mp, manifests.MaxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("loading image %s: %w: %v", image, ErrNoManifest, err)
	}
	sig, err := safefile.Read(SigPath(mp), sign.MaxSignatureSize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("loading image %s: %w", image, err)
	}
	return ParseImage(raw, sig, trust)
}

// ParseImage validates and verifies an image manifest given as bytes.
func ParseImage(raw, sig []byte, trust *sign.KeySet) (*Image, error) {
	var m manifests.ImageManifest
	if err := manifests.Decode(raw, &m); err != nil {
		return nil, fmt.Errorf("image manifest: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("image manifest %s-%s: %w", m.Line, m.Version, err)
	}
	if trust == nil {
		ks, err := sign.NewKeySet(toBytes(m.Keys)...)
		if err != nil {
			return nil, fmt.Errorf("image manifest %s-%s: keys: %w", m.Line, m.Version, err)
		}
		trust = ks
	}
	id, err := trust.VerifyFor(raw, sig, sign.ImageComment(m.Line, m.Version))
	if err != nil {
		return nil, fmt.Errorf("image manifest %s-%s: %w", m.Line, m.Version, err)
	}
	return &Image{Manifest: &m, Raw: raw, Digest: manifests.Digest(raw), KeyID: id}, nil
}

// Trust returns the keys the image lists.
func (im *Image) Trust() (*sign.KeySet, error) {
	return sign.NewKeySet(toBytes(im.Manifest.Keys)...)
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// Trusts reports whether the image trusts every key in ks.
func (im *Image) Trusts(ks *sign.KeySet) bool {
	own, err := im.Trust()
	return err == nil && own.Contains(ks)
}
