package repo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// ErrNoManifest reports an image without its manifest or signature (of
// the manifests.ErrRejected class).
var ErrNoManifest = manifests.Rejection("image manifest missing")

// ManifestPath returns the manifest path that belongs to a squashfs image:
// "x.squashfs" becomes "x.image.json".
func ManifestPath(image string) string {
	return strings.TrimSuffix(image, ".squashfs") + ".image.json"
}

// ImageFile returns the squashfs an operator means by p: p itself, or for
// the manifest beside an image ("x.image.json") the image ("x.squashfs").
func ImageFile(p string) string {
	if b, ok := strings.CutSuffix(p, ".image.json"); ok {
		return b + ".squashfs"
	}
	return p
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

// FetchImage copies the image of line l of r, with its manifest and
// signature, into directory dir and returns the image's path there, for
// the tools that need a local file (sqfs2tar, provisioning). The squashfs
// is checked against the size and SHA-256 the index records as it is
// copied, the manifest against the digest; a local repository's image is
// copied all the same, so the caller may remove dir when done.
func FetchImage(ctx context.Context, r *Repo, l *manifests.Line, dir string) (string, error) {
	return FetchImageRef(ctx, r, l.Image, dir)
}

// FetchImageRef is FetchImage for any image the index names (a line's
// image or one of its upgrade images). The manifest is fetched and
// checked first, so a mismatch costs no image download.
func FetchImageRef(ctx context.Context, r *Repo, ref manifests.ImageRef, dir string) (string, error) {
	dst, err := FetchManifest(ctx, r, ref, dir)
	if err != nil {
		return "", err
	}
	if err := copyMember(ctx, r.Store, ref.File, ref.Size, ref.SHA256, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// FetchBootImage copies the boot image the index names for image ref
// into dir, beside where FetchImageRef puts the image
// (BootImagePath), checked against the index's size and SHA-256 as it is
// copied; ErrNoBootImage when the index names none.
func FetchBootImage(ctx context.Context, r *Repo, ref manifests.ImageRef, dir string) (string, error) {
	if ref.Boot == nil {
		return "", fmt.Errorf("image %s %s: %w", ref.Version, ref.File, ErrNoBootImage)
	}
	dst := BootImagePath(filepath.Join(dir, path.Base(ref.File)))
	if err := copyMember(ctx, r.Store, ref.Boot.File, ref.Boot.Size, ref.Boot.SHA256, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// ErrNoBootImage reports an image published without a boot image.
var ErrNoBootImage = errors.New("the repository publishes no boot image (a kernel image signed for Secure Boot) with it")

// FetchManifest copies only the signed manifest of image ref into dir,
// checked against the index's digest, and returns the path the image
// would have there (for the commands that read the manifest beside an
// image path and not the image itself).
func FetchManifest(ctx context.Context, r *Repo, ref manifests.ImageRef, dir string) (string, error) {
	dst := filepath.Join(dir, path.Base(ref.File))
	mp := ManifestPath(ref.File)
	raw, sig, err := readDoc(ctx, r.Store, mp)
	if err != nil {
		return "", fmt.Errorf("fetching image %s: %w", ref.File, err)
	}
	if d := manifests.Digest(raw); d != ref.Digest {
		return "", fmt.Errorf("image %s: manifest digest %s, index says %s: %w", ref.File, d, ref.Digest, ErrTampered)
	}
	if err := os.WriteFile(ManifestPath(dst), raw, 0o644); err != nil {
		return "", fmt.Errorf("fetching image: %w", err)
	}
	if sig != nil {
		if err := os.WriteFile(SigPath(ManifestPath(dst)), sig, 0o644); err != nil {
			return "", fmt.Errorf("fetching image: %w", err)
		}
	}
	// The manifest is the one the signed index pins; its keys judge the
	// verity record.
	var m manifests.ImageManifest
	if err := manifests.Decode(raw, &m); err != nil {
		return "", fmt.Errorf("image %s: %w", ref.File, err)
	}
	if err := fetchVerity(ctx, r.Store, ref.File, dst, &Image{Manifest: &m, Raw: raw, Digest: ref.Digest}); err != nil {
		return "", err
	}
	return dst, nil
}

// copyMember copies member name (size bytes, SHA-256 sum) to the new file
// dst, refusing a member of another size or digest (dst is removed then).
func copyMember(ctx context.Context, s Store, name string, size int64, sum, dst string) (err error) {
	rc, n, err := s.Open(ctx, name)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", name, err)
	}
	defer rc.Close()
	if n >= 0 && n != size {
		return fmt.Errorf("%s is %d bytes, the index says %d: %w", name, n, size, ErrTampered)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", name, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	h := sha256.New()
	got, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(rc, size+1))
	if err != nil {
		return fmt.Errorf("fetching %s: %w", name, err)
	}
	if got != size || hex.EncodeToString(h.Sum(nil)) != sum {
		return fmt.Errorf("%s is not what the index says (%d bytes, sha256 %s): %w", name, size, sum, ErrTampered)
	}
	return nil
}
