package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/patch"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Member names of the manifest and its signature inside an archive.
const (
	ManifestMember  = ".strata/overlay.json"
	SignatureMember = ".strata/overlay.json.minisig"
)

// Archive is an overlay whose manifest has been verified.
type Archive struct {
	// Source names where the archive was read from (a host path or a
	// repository member), for messages.
	Source   string
	Manifest *manifests.OverlayManifest
	// Raw is the manifest's exact bytes, Sig its signature and Digest the
	// digest of Raw.
	Raw    []byte
	Sig    []byte
	Digest string
	// KeyID is the key that signed the manifest.
	KeyID string
	// open reopens the archive's bytes for Payload.
	open Opener
}

// Opener opens an archive's bytes from the start.
type Opener func(ctx context.Context) (io.ReadCloser, error)

// Open reads the manifest and signature of the overlay file at path,
// verifies the signature against trust and validates the manifest. The
// payload is not read; call Payload for that.
//
// path may be a symlink (an operator named it), but what it leads to must
// be a regular file: a FIFO or a device is refused before it is opened
// for reading, so it can neither block nor feed endless bytes. Reads of
// the payload stop when the context Payload is given is cancelled.
func Open(path string, trust *sign.KeySet) (*Archive, error) {
	return OpenContext(context.Background(), path, trust)
}

// OpenContext is Open whose reading of the manifest stops when ctx is
// cancelled.
func OpenContext(ctx context.Context, path string, trust *sign.KeySet) (*Archive, error) {
	open := func(ctx context.Context) (io.ReadCloser, error) {
		f, err := safefile.OpenFollow(path)
		if errors.Is(err, safefile.ErrNotRegular) {
			return nil, fmt.Errorf("opening overlay: %w: %w", ErrNotRegular, err)
		}
		if err != nil {
			return nil, fmt.Errorf("opening overlay: %w", err)
		}
		return ctxio.NewReadCloser(ctx, f), nil
	}
	return OpenFrom(ctx, path, open, trust)
}

// ErrNotRegular reports an overlay path that is not a regular file.
var ErrNotRegular = manifests.Rejection("overlay is not a regular file")

// OpenFrom is Open over the bytes open returns; name is the archive's
// Source.
func OpenFrom(ctx context.Context, name string, open Opener, trust *sign.KeySet) (*Archive, error) {
	rc, err := open(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	a, err := readHead(rc, trust)
	if err != nil {
		return nil, fmt.Errorf("overlay %s: %w", name, err)
	}
	a.Source, a.open = name, open
	return a, nil
}

// ReadArchive verifies a whole overlay from r: manifest, signature and
// every payload member, discarding content. It is what fuzzing drives.
func ReadArchive(r io.Reader, trust *sign.KeySet) (*Archive, error) {
	dr, _, err := compress.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer dr.Close()
	tr := tar.NewReader(dr)
	a, err := readManifest(tr, trust)
	if err != nil {
		return nil, err
	}
	err = a.walkPayload(tr, walker{ctx: context.Background(), verifyOnly: true, fn: func(manifests.Entry, io.Reader) error { return nil }})
	return a, err
}

func readHead(r io.Reader, trust *sign.KeySet) (*Archive, error) {
	dr, _, err := compress.NewReader(r)
	if err != nil {
		return nil, err
	}
	defer dr.Close()
	return readManifest(tar.NewReader(dr), trust)
}

func readManifest(tr *tar.Reader, trust *sign.KeySet) (*Archive, error) {
	raw, err := member(tr, ManifestMember, manifests.MaxManifestSize)
	if err != nil {
		return nil, err
	}
	sig, err := member(tr, SignatureMember, sign.MaxSignatureSize)
	if err != nil {
		if errors.Is(err, ErrFormat) {
			return nil, fmt.Errorf("%w: %w", sign.ErrUnsigned, err)
		}
		return nil, err
	}
	id, comment, err := trust.VerifyComment(raw, sig)
	if err != nil {
		return nil, err
	}
	var m manifests.OverlayManifest
	if err := manifests.Decode(raw, &m); err != nil {
		return nil, err
	}
	if err := sign.CheckComment(comment, sign.OverlayComment(m.Line, m.Version)); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &Archive{Manifest: &m, Raw: raw, Sig: sig, Digest: manifests.Digest(raw), KeyID: id}, nil
}

func member(tr *tar.Reader, name string, limit int64) ([]byte, error) {
	h, err := tr.Next()
	if err != nil {
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: archive ends before %s", ErrFormat, name)
		}
		return nil, fmt.Errorf("%w: reading %s: %v", ErrFormat, name, err)
	}
	if h.Name != name || h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("%w: expected %s, found %q", ErrFormat, name, h.Name)
	}
	if h.Size > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes (limit %d)", manifests.ErrTooLarge, name, h.Size, limit)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", ErrFormat, name, err)
	}
	return b, nil
}

// Payload streams the payload: for each member, after checking its header
// against the manifest entry, fn gets the entry and the content (files
// only). Content is hashed as fn reads it and compared with the manifest
// at the member's end; fn's work must be discarded when Payload fails.
//
// A file the overlay ships as a patch (manifests.Patch) is rebuilt before
// fn sees it: its member is read whole and checked against the patch's
// size and SHA-256, bases supplies the content the patch was made
// against (checked against the patch's base SHA-256), and fn gets the
// rebuilt content. bases may be nil for an overlay without patches.
func (a *Archive) Payload(ctx context.Context, bases tree.Bases, fn func(e manifests.Entry, r io.Reader) error) error {
	return a.read(ctx, walker{bases: bases, fn: fn})
}

// Verify reads the whole payload and checks every member against the
// manifest without keeping anything: file members against their entry's
// size and SHA-256, patch members against the patch's (the files they
// rebuild are checked when they are rebuilt, which needs the node's
// content).
func (a *Archive) Verify(ctx context.Context) error {
	return a.read(ctx, walker{verifyOnly: true, fn: func(manifests.Entry, io.Reader) error { return nil }})
}

// File returns the content the overlay gives file path (one of its file
// entries), checked against its entry; bases is asked for that file's
// base only (the overlay's other patches are checked, not rebuilt).
func (a *Archive) File(ctx context.Context, bases tree.Bases, path string) ([]byte, error) {
	var found []byte
	seen := false
	err := a.read(ctx, walker{bases: bases, only: path, fn: func(e manifests.Entry, r io.Reader) error {
		if e.Path != path || r == nil {
			return nil
		}
		seen = true
		b, err := io.ReadAll(r)
		found = b
		return err
	}})
	if err == nil && !seen {
		err = fmt.Errorf("overlay %s: no file /%s", a.Source, path)
	}
	return found, err
}

func (a *Archive) read(ctx context.Context, w walker) error {
	if a.open == nil {
		return fmt.Errorf("overlay %s: %w: no payload to read", a.Source, ErrFormat)
	}
	f, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer f.Close()
	dr, _, err := compress.NewReader(f)
	if err != nil {
		return fmt.Errorf("overlay %s: %w", a.Source, err)
	}
	defer dr.Close()
	tr := tar.NewReader(dr)
	raw, err := member(tr, ManifestMember, manifests.MaxManifestSize)
	if err == nil {
		_, err = member(tr, SignatureMember, sign.MaxSignatureSize)
	}
	if err != nil {
		return fmt.Errorf("overlay %s: %w", a.Source, err)
	}
	if string(raw) != string(a.Raw) {
		return fmt.Errorf("overlay %s: %w: manifest changed since it was verified", a.Source, ErrFormat)
	}
	fn := w.fn
	w.ctx = ctx
	w.fn = func(e manifests.Entry, r io.Reader) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(e, r)
	}
	if err := a.walkPayload(tr, w); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// A cancelled read is an interruption, not a bad payload.
			return fmt.Errorf("overlay %s: reading its payload: %w", a.Source, cerr)
		}
		return fmt.Errorf("overlay %s: %w", a.Source, err)
	}
	return nil
}

// walker is what one pass over a payload does with its members.
type walker struct {
	ctx        context.Context
	bases      tree.Bases
	verifyOnly bool   // patch members are checked, not rebuilt
	only       string // when set, only this path's patch is rebuilt
	fn         func(manifests.Entry, io.Reader) error
}

func (a *Archive) walkPayload(tr *tar.Reader, w walker) error {
	// Each member must match its entry's size exactly (a patch member
	// its patch's size), so the manifest bounds what is decompressed;
	// the default limits bound the manifest.
	rd := tree.NewTarReader(tr, tree.Limits{MaxEntries: len(a.Manifest.Entries) + 1})
	patches := make(map[string]manifests.Patch, len(a.Manifest.Patches))
	for _, p := range a.Manifest.Patches {
		patches[p.Path] = p
	}
	for i, want := range a.Manifest.Entries {
		got, r, err := rd.Next()
		if err == io.EOF {
			return fmt.Errorf("%w: archive ends before %s (%d of %d members)", ErrPayload, want.Path, i, len(a.Manifest.Entries))
		}
		if err != nil {
			return fmt.Errorf("%w: member %d (expected %s): %w", ErrPayload, i, want.Path, err)
		}
		p, patched := patches[want.Path]
		size := want.Size
		if patched {
			size = p.Size
		}
		got.SHA256 = want.SHA256
		if got.Type == manifests.TypeFile && got.Size != size && got.Path == want.Path {
			return fmt.Errorf("%w: member %s is %d bytes, manifest says %d", ErrPayload, got.Path, got.Size, size)
		}
		got.Size = want.Size
		if got != want {
			return fmt.Errorf("%w: member %d is %s %s %04o %d:%d, manifest says %s %s %04o %d:%d",
				ErrPayload, i, got.Type, got.Path, uint32(got.Mode), got.UID, got.GID, want.Type, want.Path, uint32(want.Mode), want.UID, want.GID)
		}
		if want.Type != manifests.TypeFile {
			if err := w.fn(want, nil); err != nil {
				return err
			}
			continue
		}
		if patched {
			if r, err = w.rebuild(want, p, r); err != nil {
				return err
			}
			if r == nil {
				continue // verified only
			}
		}
		h := sha256.New()
		cr := &countReader{r: io.TeeReader(r, h)}
		if err := w.fn(want, cr); err != nil {
			if cr.err != nil {
				return fmt.Errorf("%w: reading member %s: %w", ErrPayload, want.Path, cr.err)
			}
			return err
		}
		if _, err := io.Copy(io.Discard, cr); err != nil {
			return fmt.Errorf("%w: reading member %s: %w", ErrPayload, want.Path, err)
		}
		if cr.n != want.Size {
			return fmt.Errorf("%w: member %s truncated: %d of %d bytes", ErrPayload, want.Path, cr.n, want.Size)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != want.SHA256 {
			return fmt.Errorf("%w: member %s has sha256 %s, manifest says %s", ErrPayload, want.Path, sum, want.SHA256)
		}
	}
	if extra, _, err := rd.Next(); err != io.EOF {
		if err == nil {
			return fmt.Errorf("%w: extra member %s after the last manifest entry", ErrPayload, extra.Path)
		}
		return fmt.Errorf("%w: after the last manifest entry: %w", ErrPayload, err)
	}
	return nil
}

// rebuild reads patch member r of entry e, checks it against p and
// returns the rebuilt content (nil when only verifying).
func (w walker) rebuild(e manifests.Entry, p manifests.Patch, r io.Reader) (io.Reader, error) {
	pb, err := io.ReadAll(io.LimitReader(r, p.Size+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading patch member %s: %w", ErrPayload, e.Path, err)
	}
	if int64(len(pb)) != p.Size || sha256Hex(pb) != p.SHA256 {
		return nil, fmt.Errorf("%w: patch member %s (%d bytes, sha256 %s) is not the patch the manifest names", ErrPayload, e.Path, len(pb), sha256Hex(pb))
	}
	if w.verifyOnly || w.only != "" && w.only != e.Path {
		return nil, nil
	}
	if w.bases == nil {
		return nil, fmt.Errorf("%w: /%s ships as a patch and no content to rebuild it from was given", ErrNoBase, e.Path)
	}
	base, err := w.bases(w.ctx, e.Path, p.Base)
	if err != nil {
		return nil, fmt.Errorf("%w: /%s: %w", ErrNoBase, e.Path, err)
	}
	if got := sha256Hex(base); got != p.Base {
		return nil, fmt.Errorf("%w: /%s ships as a patch against content %s, and the content at hand is %s", ErrNoBase, e.Path, short(p.Base), short(got))
	}
	content, err := patch.Apply(base, pb, e.Size)
	if err != nil {
		return nil, fmt.Errorf("%w: rebuilding %s: %w", ErrPayload, e.Path, err)
	}
	return bytes.NewReader(content), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func short(sum string) string { return sum[:min(12, len(sum))] }

// Layer returns the overlay as a layer of a fold, its payload streamed by
// Payload.
func (a *Archive) Layer() tree.Layer {
	l := ManifestLayer(a.Manifest)
	l.Payload = a.Payload
	for _, p := range a.Manifest.Patches {
		l.Needs = append(l.Needs, p.Base)
	}
	return l
}

// ManifestLayer is the layer an overlay manifest describes, without a
// payload.
func ManifestLayer(m *manifests.OverlayManifest) tree.Layer {
	return tree.Layer{Name: "overlay " + m.Version, Entries: m.Entries, Deletes: m.Deletes}
}

// countReader counts what it reads and remembers a read error, so a
// consumer's failure can be told apart from a broken archive.
type countReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("archive truncated: %w", err)
	}
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}
