package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package.
var (
	// ErrExists reports a repository or line that already exists.
	ErrExists = errors.New("already exists")
	// ErrTampered reports a file whose digest does not match the index
	// (of the manifests.ErrRejected class).
	ErrTampered = manifests.Rejection("file does not match the index")
	// ErrSequence reports an overlay that does not continue the line's
	// head (package overlay re-exports it).
	ErrSequence = manifests.Rejection("out of sequence")
	// ErrAmbiguousLine reports a repository with several lines where the
	// caller named none (package overlay re-exports it).
	ErrAmbiguousLine = errors.New("which line?")
	// ErrReadOnly reports a write to a store that cannot be written.
	ErrReadOnly = errors.New("store is read-only")
)

// IndexFile is the index's name inside a repository.
const IndexFile = "index.json"

// Repo is an opened repository with its verified index.
type Repo struct {
	// Dir is the directory of a repository in a DirStore ("" otherwise).
	Dir string
	// Store holds the repository's files.
	Store Store
	Index *manifests.Index
	// KeyID is the key that signed the index.
	KeyID string
	// Validity is how long the next Save keeps the index current (zero:
	// DefaultValidity).
	Validity time.Duration

	raw, sig []byte // the index and signature as read and verified
	// images holds the image manifests verified against their own keys
	// (ImageOf with no trust), by file: opening a repository reads them
	// for the keys, and loading a line reads its image again.
	imagesMu sync.Mutex
	images   map[string]*Image
}

// Init starts a repository at dir whose line begins at image, copying the
// image and its manifest in and signing a new index with key. If dir holds
// a repository already, the line is added to it; an existing line of the
// same name is ErrExists.
func Init(ctx context.Context, dir, image string, key *sign.Key) (*Repo, error) {
	if IsURL(dir) {
		return nil, fmt.Errorf("init repository %s: %w", dir, ErrRemote)
	}
	own, err := key.PublicKeySet()
	if err != nil {
		return nil, err
	}
	im, err := LoadImage(image, nil)
	if err != nil {
		return nil, err
	}
	if !im.Trusts(own) {
		return nil, fmt.Errorf("init repository %s: image %s does not trust signing key %s: nodes could not verify this repository: %w", dir, image, key.ID(), sign.ErrBadSignature)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("init repository %s: %w", dir, err)
	}
	unlock, err := Lock(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r := &Repo{Dir: dir, Store: Dir(dir), Index: &manifests.Index{Schema: manifests.Schema, Kind: manifests.KindIndex}}
	if _, err := os.Stat(filepath.Join(dir, IndexFile)); err == nil {
		if r, err = Open(ctx, dir, own); err != nil {
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
	vd, err := checkVerity(ctx, image, im, nil)
	if err != nil {
		return nil, err
	}
	rel := filepath.ToSlash(filepath.Join("images", fmt.Sprintf("%s-%s.squashfs", m.Line, m.Version)))
	st := Dir(dir)
	sum, size, err := putFile(ctx, st, rel, image)
	if err != nil {
		return nil, err
	}
	mp := ManifestPath(rel)
	if err := st.Put(ctx, mp, bytes.NewReader(im.Raw)); err != nil {
		return nil, err
	}
	if _, _, err := putFile(ctx, st, SigPath(mp), SigPath(ManifestPath(image))); err != nil {
		return nil, err
	}
	if err := putVerity(ctx, st, rel, vd); err != nil {
		return nil, err
	}
	r.Index.Lines = append(r.Index.Lines, manifests.Line{
		Name:     m.Line,
		Image:    manifests.ImageRef{Version: m.Version, File: rel, Digest: im.Digest, SHA256: sum, Size: size},
		Overlays: []manifests.OverlayRef{},
	})
	return r, r.Save(ctx, key)
}

// Refresh re-publishes the index of the repository in dir unchanged but
// for a serial one higher and an expiry validity from now (zero:
// DefaultValidity), signed with key, which must have signed the index
// before. Run it more often than the validity, so nodes never see the
// index expire.
//
// It is also how an index from before serials, expiries and sizes is
// brought up to date: the missing sizes are read off the members, whose
// SHA-256 the index already pins.
func Refresh(ctx context.Context, dir string, key *sign.Key, validity time.Duration) (*Repo, error) {
	return RefreshTo(ctx, dir, key, validity, 0)
}

// RefreshTo is Refresh with the new index's serial set to serial (0: one
// higher than the current one), which must be higher than the current
// one: the way back for nodes that took an index a compromised key signed
// with a serial ahead of the publisher's (docs/security.md).
func RefreshTo(ctx context.Context, dir string, key *sign.Key, validity time.Duration, serial uint64) (*Repo, error) {
	own, err := key.PublicKeySet()
	if err != nil {
		return nil, err
	}
	st := Dir(dir)
	if !IsURL(dir) {
		// Not a repository: say so, and leave no lock file behind.
		if _, err := os.Lstat(filepath.Join(dir, IndexFile)); err != nil {
			return nil, fmt.Errorf("refreshing repository %s: %w", dir, err)
		}
	}
	unlock, err := Lock(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	raw, sig, err := readDoc(ctx, st, IndexFile)
	if err != nil {
		return nil, fmt.Errorf("refreshing repository %s: %w", dir, err)
	}
	if _, err := own.VerifyFor(raw, sig, sign.IndexComment); err != nil {
		return nil, fmt.Errorf("refreshing repository %s (the index must be signed by key %s): %w", dir, key.ID(), err)
	}
	var x manifests.Index
	if err := manifests.Decode(raw, &x); err != nil {
		return nil, fmt.Errorf("refreshing repository %s: %w", dir, err)
	}
	// A size is read off a member only as the member the index pins by
	// its SHA-256: nothing unverified is signed.
	size := func(name, sum string, have int64) (int64, error) {
		if have > 0 {
			return have, nil
		}
		rc, n, err := st.Open(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("refreshing repository %s: %w", dir, err)
		}
		rc.Close()
		got, _, err := HashMember(ctx, st, name, n)
		if err != nil {
			return 0, fmt.Errorf("refreshing repository %s: %w", dir, err)
		}
		if got != sum {
			return 0, fmt.Errorf("refreshing repository %s: %s has sha256 %s, the index says %s: %w", dir, name, got, sum, ErrTampered)
		}
		return n, nil
	}
	for i := range x.Lines {
		l := &x.Lines[i]
		if l.Image.Size, err = size(l.Image.File, l.Image.SHA256, l.Image.Size); err != nil {
			return nil, err
		}
		for j := range l.Overlays {
			o := &l.Overlays[j]
			if o.Size, err = size(o.File, o.SHA256, o.Size); err != nil {
				return nil, err
			}
		}
	}
	if serial != 0 {
		if serial <= x.Serial || serial > manifests.MaxSerial {
			return nil, fmt.Errorf("refreshing repository %s: serial %d must be above the index's %d and at most %d: %w", dir, serial, x.Serial, uint64(manifests.MaxSerial), manifests.ErrInvalid)
		}
		x.Serial = serial - 1 // Save counts one up
	}
	r := &Repo{Dir: dir, Store: st, Index: &x, Validity: validity}
	// Having signed the index once is not enough: a key rotation may
	// have revoked the key since.
	for i := range x.Lines {
		ks, err := HeadKeys(ctx, r, &x.Lines[i])
		if err != nil {
			return nil, fmt.Errorf("refreshing repository %s: %w", dir, err)
		}
		if !ks.HasKey(key) {
			return nil, fmt.Errorf("refreshing repository %s: line %s no longer trusts key %s (trusted: %s): %w", dir, x.Lines[i].Name, key.ID(), strings.Join(ks.IDs(), ", "), sign.ErrBadSignature)
		}
	}
	return r, r.Save(ctx, key)
}

// Open reads the repository in directory dir (see OpenStore). The
// commands that use it need the repository's files on disk: a URL is
// ErrRemote.
func Open(ctx context.Context, dir string, trust *sign.KeySet) (*Repo, error) {
	if IsURL(dir) {
		return nil, fmt.Errorf("opening repository %s: %w", dir, ErrRemote)
	}
	return OpenStore(ctx, Dir(dir), trust)
}

// OpenStore reads a repository's index from s and verifies its signature
// against trust, the keys trusted at each line's image (nil: the keys the
// images list), followed through the lines' key rotations when the index
// is signed by a key one of them brought in.
func OpenStore(ctx context.Context, s Store, trust *sign.KeySet) (*Repo, error) {
	return open(ctx, s, trust, nil)
}

func open(ctx context.Context, s Store, trust *sign.KeySet, at *Position) (*Repo, error) {
	r := &Repo{Store: s}
	if d, ok := s.(localDir); ok {
		r.Dir = d.localDir()
	}
	where := fmt.Sprint(s)
	raw, sig, err := readDoc(ctx, s, IndexFile)
	if err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", where, err)
	}
	if trust != nil {
		// Nothing of an index is parsed before its signature holds,
		// unless the trusted keys do not verify it; then what it names
		// is followed only as far as signed manifests lead (see
		// verifyIndex). Without keys, the repository's own images
		// name them, and the index must be read to find those.
		if _, err := trust.VerifyFor(raw, sig, sign.IndexComment); err != nil && !errors.Is(err, sign.ErrBadSignature) {
			return nil, fmt.Errorf("opening repository %s: index signature: %w", where, err)
		}
	}
	var x manifests.Index
	if err := manifests.Decode(raw, &x); err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", where, err)
	}
	if err := x.Validate(); err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", where, err)
	}
	if err := r.verifyIndex(ctx, raw, sig, &x, trust, at); err != nil {
		return nil, fmt.Errorf("opening repository %s: %w", where, err)
	}
	r.Index, r.raw, r.sig = &x, raw, sig
	return r, nil
}

// Image loads and verifies the image manifest of line l, checking it
// against the digest the index records.
func (r *Repo) Image(ctx context.Context, l *manifests.Line, trust *sign.KeySet) (*Image, error) {
	return r.ImageOf(ctx, l, l.Image, trust)
}

// ImageOf is Image for ref, the line's image or one of its upgrade
// images: the manifest must hash to ref's digest and be of line l at
// ref's version (and, for a regenerated image, through ref's head).
// With no trust, a manifest r verified before under the same digest is
// not read again: the Image returned is shared, and callers must not
// change it.
func (r *Repo) ImageOf(ctx context.Context, l *manifests.Line, ref manifests.ImageRef, trust *sign.KeySet) (*Image, error) {
	r.imagesMu.Lock()
	im := r.images[ref.File]
	r.imagesMu.Unlock()
	if trust != nil || im == nil || im.Digest != ref.Digest {
		mp := ManifestPath(ref.File)
		raw, sig, err := readDoc(ctx, r.Store, mp)
		if err != nil {
			return nil, fmt.Errorf("loading image %s: %w: %v", r.Path(ref.File), ErrNoManifest, err)
		}
		if im, err = ParseImage(raw, sig, trust); err != nil {
			return nil, fmt.Errorf("line %s image %s: %w", l.Name, ref.File, err)
		}
		if trust == nil {
			r.imagesMu.Lock()
			if r.images == nil {
				r.images = map[string]*Image{}
			}
			r.images[ref.File] = im
			r.imagesMu.Unlock()
		}
	}
	if im.Digest != ref.Digest {
		return nil, fmt.Errorf("line %s image %s: manifest digest %s, index says %s: %w", l.Name, ref.File, im.Digest, ref.Digest, ErrTampered)
	}
	if m := im.Manifest; m.Line != l.Name || m.Version != ref.Version || (m.Head == nil) != (ref.Head == nil) || ref.Head != nil && *m.Head != *ref.Head {
		return nil, fmt.Errorf("line %s image %s: the manifest is of line %s at %s, the index says %s: %w", l.Name, ref.File, m.Line, m.Version, ref.Version, ErrTampered)
	}
	return im, nil
}

// Path returns the host path of a repository-relative file, for the tools
// that need one (mksquashfs, sqfs2tar) and for messages.
func (r *Repo) Path(rel string) string { return filepath.Join(r.Dir, filepath.FromSlash(rel)) }

// Lock takes the lock of the repository in directory dir (see LockFile),
// waiting up to ten minutes for another writer. A URL is ErrRemote.
func Lock(ctx context.Context, dir string) (func(), error) {
	if IsURL(dir) {
		return nil, fmt.Errorf("repository %s: %w", dir, ErrRemote)
	}
	unlock, err := safefile.Lock(ctx, filepath.Join(dir, LockFile), 10*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("locking repository %s: %w", dir, err)
	}
	return unlock, nil
}

// LockFile is the repository's lock, held by every command that writes
// its index (one writer at a time).
const LockFile = ".lock"

// DefaultValidity is how long a published index stays current unless the
// repository says otherwise (Repo.Validity).
const DefaultValidity = 30 * 24 * time.Hour

// Save publishes the index: lines with SealAt or more inline overlays
// have their oldest sealed into segment files (see manifests.SegmentSize);
// its serial grows by one and it expires Validity (DefaultValidity) from
// now; then it is signed and written (signature first, then the index,
// each atomically).
func (r *Repo) Save(ctx context.Context, key *sign.Key) error {
	validity := r.Validity
	if validity <= 0 {
		validity = DefaultValidity
	}
	p, ok := r.Store.(Putter)
	if !ok {
		return fmt.Errorf("saving repository %s: %w", r.Dir, ErrReadOnly)
	}
	if err := r.seal(ctx, p); err != nil {
		return fmt.Errorf("saving repository %s: %w", r.Dir, err)
	}
	r.Index.Serial++
	r.Index.Expires = time.Now().Add(validity).UTC().Truncate(time.Second).Format(time.RFC3339)
	if err := r.Index.Validate(); err != nil {
		return fmt.Errorf("saving repository %s: %w", r.Dir, err)
	}
	b, err := manifests.Encode(r.Index)
	if err != nil {
		return err
	}
	if len(b) > manifests.MaxIndexSize {
		return fmt.Errorf("saving repository %s: the index would be %d bytes, over the %d nodes read (too many lines in one repository): %w", r.Dir, len(b), manifests.MaxIndexSize, manifests.ErrTooLarge)
	}
	if err := p.Put(ctx, SigPath(IndexFile), bytes.NewReader(key.Sign(b, sign.IndexComment))); err != nil {
		return err
	}
	return p.Put(ctx, IndexFile, bytes.NewReader(b))
}

// putFile copies the host file src to member name of s and returns its
// SHA-256.
func putFile(ctx context.Context, s Putter, name, src string) (string, int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", 0, fmt.Errorf("copying %s: %w", src, err)
	}
	defer in.Close()
	sum, n, err := PutHashed(ctx, s, name, in)
	if err != nil {
		return "", 0, fmt.Errorf("copying %s: %w", src, err)
	}
	return sum, n, nil
}

// OpenAudited opens the repository in s as an auditor does, with keys of
// its own: the lines' images and overlays may be signed by trust or by
// history keys (keys a rotation revoked, which verify history), the index
// only by trust. Nil trust means the repository's own keys.
func OpenAudited(ctx context.Context, s Store, trust, history *sign.KeySet) (*Repo, error) {
	r, err := OpenStore(ctx, s, sign.WithHistory(trust, history))
	if err != nil {
		return nil, err
	}
	if trust != nil && !trust.Has(r.KeyID) {
		return nil, fmt.Errorf("the index is signed by key %s, not by the auditor's key %s: %w", r.KeyID, strings.Join(trust.IDs(), ", "), sign.ErrBadSignature)
	}
	return r, nil
}
