package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package.
var (
	// ErrExists reports a repository or line that already exists.
	ErrExists = errors.New("repo: already exists")
	// ErrTampered reports a file whose digest does not match the index
	// (of the manifests.ErrRejected class).
	ErrTampered = manifests.Rejection("repo: file does not match the index")
)

// IndexFile is the index's name inside a repository.
const IndexFile = "index.json"

// Repo is an opened repository with its verified index.
type Repo struct {
	Dir   string
	Index *manifests.Index
	// KeyID is the key that signed the index.
	KeyID string
}

// Init starts a repository at dir whose line begins at image, copying the
// image and its manifest in and signing a new index with key. If dir holds
// a repository already, the line is added to it; an existing line of the
// same name is ErrExists.
func Init(dir, image string, key *sign.Key) (*Repo, error) {
	own, err := key.PublicKeySet()
	if err != nil {
		return nil, err
	}
	im, err := LoadImage(image, nil)
	if err != nil {
		return nil, err
	}
	if !im.Trusts(own) {
		return nil, fmt.Errorf("init repository %s: image %s does not trust signing key %s: nodes could not verify this repository", dir, image, key.ID())
	}
	r := &Repo{Dir: dir, Index: &manifests.Index{Schema: manifests.Schema, Kind: manifests.KindIndex}}
	if _, err := os.Stat(filepath.Join(dir, IndexFile)); err == nil {
		if r, err = Open(dir, own); err != nil {
			return nil, err
		}
	}
	m := im.Manifest
	if _, err := r.Index.Find(m.Line); err == nil {
		return nil, fmt.Errorf("init repository %s: line %s: %w", dir, m.Line, ErrExists)
	}
	if m.Head != nil {
		return nil, fmt.Errorf("init repository %s: %s is a regenerated image; start a line from its original image", dir, image)
	}
	rel := filepath.Join("images", fmt.Sprintf("%s-%s.squashfs", m.Line, m.Version))
	sum, err := copyFile(image, filepath.Join(dir, rel))
	if err != nil {
		return nil, err
	}
	mp := ManifestPath(filepath.Join(dir, rel))
	if err := node.WriteFileAtomic(mp, im.Raw, 0o644); err != nil {
		return nil, err
	}
	if _, err := copyFile(SigPath(ManifestPath(image)), SigPath(mp)); err != nil {
		return nil, err
	}
	r.Index.Lines = append(r.Index.Lines, manifests.Line{
		Name:     m.Line,
		Image:    manifests.ImageRef{Version: m.Version, File: filepath.ToSlash(rel), Digest: im.Digest, SHA256: sum},
		Overlays: []manifests.OverlayRef{},
	})
	return r, r.Save(key)
}

// Open reads a repository's index and verifies its signature against
// trust. A nil trust uses the keys of the repository's own images.
func Open(dir string, trust *sign.KeySet) (*Repo, error) {
	p := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("opening repository: %w", err)
	}
	sig, err := os.ReadFile(SigPath(p))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("opening repository: %w", err)
	}
	var x manifests.Index
	if err := manifests.Decode(raw, &x); err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", dir, err)
	}
	if err := x.Validate(); err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", dir, err)
	}
	r := &Repo{Dir: dir, Index: &x}
	if trust == nil {
		if trust, err = r.imageKeys(); err != nil {
			return nil, err
		}
	}
	if r.KeyID, err = trust.Verify(raw, sig); err != nil {
		return nil, fmt.Errorf("opening repository %s: index signature: %w", dir, err)
	}
	return r, nil
}

func (r *Repo) imageKeys() (*sign.KeySet, error) {
	ks := &sign.KeySet{}
	for _, l := range r.Index.Lines {
		im, err := r.Image(&l, nil)
		if err != nil {
			return nil, err
		}
		if err := ks.Merge(im.Trust()); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

// Image loads and verifies the image manifest of line l, checking it
// against the digest the index records.
func (r *Repo) Image(l *manifests.Line, trust *sign.KeySet) (*Image, error) {
	im, err := LoadImage(r.Path(l.Image.File), trust)
	if err != nil {
		return nil, err
	}
	if im.Digest != l.Image.Digest {
		return nil, fmt.Errorf("line %s image %s: manifest digest %s, index says %s: %w", l.Name, l.Image.File, im.Digest, l.Image.Digest, ErrTampered)
	}
	return im, nil
}

// Path returns the host path of a repository-relative file.
func (r *Repo) Path(rel string) string { return filepath.Join(r.Dir, filepath.FromSlash(rel)) }

// Save signs and writes the index (signature first, then the index, each
// atomically).
func (r *Repo) Save(key *sign.Key) error {
	if err := r.Index.Validate(); err != nil {
		return fmt.Errorf("saving repository %s: %w", r.Dir, err)
	}
	b, err := manifests.Encode(r.Index)
	if err != nil {
		return err
	}
	p := filepath.Join(r.Dir, IndexFile)
	if err := node.WriteFileAtomic(SigPath(p), key.Sign(b, "strata index"), 0o644); err != nil {
		return err
	}
	return node.WriteFileAtomic(p, b, 0o644)
}

func copyFile(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copying %s: %w", src, err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("copying to %s: %w", dst, err)
	}
	tmp := dst + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("copying to %s: %w", dst, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
