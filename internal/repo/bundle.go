package repo

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// A bundle is a repository's signed index and the overlays of one line
// from one version to another, in one uncompressed tar, for a node with no
// network: apply-overlay --bundle reads it as a Store. Nothing in it is
// trusted that is not signed: the index's signature, the overlays' own,
// and every digest the index records hold as for any repository.

// maxBundleMembers bounds how many members a bundle may have.
const maxBundleMembers = 100000

// BundleStore is a Store over a bundle file.
type BundleStore struct {
	path    string
	f       *os.File
	members map[string]span
	// Info is what the bundle says it carries (unsigned: a hint for
	// where to stop, checked against nothing but the index).
	Info BundleInfo
}

// BundleInfo is a bundle's bundle.json.
type BundleInfo struct {
	Line string `json:"line"`
	From string `json:"from"`
	To   string `json:"to"`
}

// BundleInfoFile is the member naming what a bundle carries.
const BundleInfoFile = "bundle.json"

type span struct{ off, size int64 }

var _ Store = (*BundleStore)(nil)

// OpenBundle indexes the bundle at path: a regular file (opened without
// following a symlink into a device or FIFO), an uncompressed tar whose
// members are regular files with safe, unique names. Close releases it.
func OpenBundle(ctx context.Context, path string) (*BundleStore, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening bundle: %w", err)
	}
	return indexBundle(ctx, f, path)
}

// indexBundle reads the members of the bundle open in f (at its start),
// taking over f.
func indexBundle(ctx context.Context, f *os.File, path string) (*BundleStore, error) {
	b := &BundleStore{path: path, f: f, members: map[string]span{}}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("reading bundle %s: %w", path, err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if h.Typeflag != tar.TypeReg || !fs.ValidPath(h.Name) || h.Name == "." {
			f.Close()
			return nil, fmt.Errorf("bundle %s: member %q: %w", path, h.Name, ErrNotRegular)
		}
		if _, dup := b.members[h.Name]; dup || len(b.members) >= maxBundleMembers {
			f.Close()
			return nil, fmt.Errorf("bundle %s: member %q twice, or too many members: %w", path, h.Name, manifests.ErrInvalid)
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("reading bundle %s: %w", path, err)
		}
		b.members[h.Name] = span{off: off, size: h.Size}
	}
	raw, err := ReadMember(ctx, b, BundleInfoFile, 64<<10)
	if err == nil {
		err = manifests.Decode(raw, &b.Info)
	}
	if err == nil {
		if _, err = manifests.ParseVersion(b.Info.To); err == nil {
			err = manifests.ValidLine(b.Info.Line)
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bundle %s: %s: %w", path, BundleInfoFile, err)
	}
	return b, nil
}

// Close closes the bundle file.
func (b *BundleStore) Close() error { return b.f.Close() }

// String names the bundle.
func (b *BundleStore) String() string { return "bundle " + b.path }

// Open opens member name; see Store.
func (b *BundleStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: b.path + ":" + name, Err: err}
	}
	if !fs.ValidPath(name) || name == "." {
		return nil, 0, &fs.PathError{Op: "open", Path: b.path + ":" + name, Err: manifests.ErrUnsafePath}
	}
	s, ok := b.members[name]
	if !ok && hasMemberBelow(b.members, name) {
		return nil, 0, &fs.PathError{Op: "open", Path: b.path + ":" + name, Err: fmt.Errorf("a directory: %w", ErrNotRegular)}
	}
	if !ok {
		return nil, 0, &fs.PathError{Op: "open", Path: b.path + ":" + name, Err: fmt.Errorf("the bundle does not carry it (make one with strata bundle --from the node's head): %w", fs.ErrNotExist)}
	}
	return &member{ctx: ctx, f: io.NewSectionReader(b.f, s.off, s.size), left: s.size}, s.size, nil
}

// WriteBundle writes to out the index of r (as signed) and the overlays
// of its line after version from up to and including to (empty: the
// line's head). from may be the line's image version. The index is the
// one r verified, byte for byte; the overlays are copied as they are,
// each checked against the size and SHA-256 the index records; out is
// written beside itself and renamed into place, or not at all.
func WriteBundle(ctx context.Context, r *Repo, line, from, to, out string) (n int, err error) {
	l, err := pickLine(r, line)
	if err != nil {
		return 0, err
	}
	if err := r.Expand(ctx, l); err != nil {
		return 0, err
	}
	// A node at from reads the index's segments when the overlay after
	// from is sealed in one: then the bundle carries them all.
	var pinned []manifests.OverlayRef
	segs := l.SegmentRefs()
	if next := successor(l, from); next >= 0 && next < len(segs)*manifests.SegmentSize {
		for _, seg := range segs {
			pinned = append(pinned, manifests.OverlayRef{File: seg.File, Size: seg.Size, SHA256: seg.SHA256})
		}
	}
	if to == "" {
		to = l.Head().Version
	}
	if !l.HasVersion(from) || !l.HasVersion(to) {
		return 0, fmt.Errorf("bundle: line %s has no version %s or %s: %w", l.Name, from, to, ErrSequence)
	}
	if manifests.CompareVersions(from, to) >= 0 {
		return 0, fmt.Errorf("bundle: --from %s is not before --to %s: %w", from, to, ErrSequence)
	}
	refs := pinned
	for _, o := range l.Overlays {
		if manifests.CompareVersions(o.Version, from) > 0 && manifests.CompareVersions(o.Version, to) <= 0 {
			refs = append(refs, o)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".")
	if err != nil {
		return 0, fmt.Errorf("writing bundle: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	tw := tar.NewWriter(tmp)
	header := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatPAX})
	}
	// The index exactly as it was verified when r was opened.
	if r.raw == nil {
		return 0, fmt.Errorf("bundle: the repository's index was not read from its store")
	}
	info, err := json.Marshal(BundleInfo{Line: l.Name, From: from, To: to})
	if err != nil {
		return 0, err
	}
	for _, doc := range []struct {
		name string
		data []byte
	}{{BundleInfoFile, info}, {IndexFile, r.raw}, {SigPath(IndexFile), r.sig}} {
		if err := header(doc.name, int64(len(doc.data))); err != nil {
			return 0, err
		}
		if _, err := tw.Write(doc.data); err != nil {
			return 0, err
		}
	}
	n = len(refs) - len(pinned)
	for _, o := range refs {
		rc, size, err := r.Store.Open(ctx, o.File)
		if err != nil {
			return 0, err
		}
		if size >= 0 && size != o.Size {
			rc.Close()
			return 0, fmt.Errorf("bundle: %s is %d bytes, the index says %d: %w", o.File, size, o.Size, ErrTampered)
		}
		if err := header(o.File, o.Size); err != nil {
			rc.Close()
			return 0, err
		}
		// Checked as it is copied: a member that is not what the index
		// says fails the bundle (which is then not written).
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(rc, o.Size))
		rc.Close()
		if err == nil && (n != o.Size || hex.EncodeToString(h.Sum(nil)) != o.SHA256) {
			err = fmt.Errorf("%s is not what the index says (size %d, sha256 %s): %w", o.File, o.Size, o.SHA256, ErrTampered)
		}
		if err != nil {
			return 0, fmt.Errorf("bundle: copying %s: %w", o.File, err)
		}
	}
	if err := tw.Close(); err != nil {
		return 0, fmt.Errorf("writing bundle %s: %w", out, err)
	}
	if err := tmp.Sync(); err != nil {
		return 0, fmt.Errorf("writing bundle %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("writing bundle %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return 0, fmt.Errorf("writing bundle %s: %w", out, err)
	}
	return n, nil
}

// successor returns the index in l.Overlays (the whole line) of the
// overlay after version v: 0 for the image; -1 when v is not in l.
func successor(l *manifests.Line, v string) int {
	if v == l.Image.Version {
		return 0
	}
	for i, o := range l.Overlays {
		if o.Version == v {
			return i + 1
		}
	}
	return -1
}

// MaxSpooledBundle bounds a bundle SpoolBundle reads from a stream.
const MaxSpooledBundle = 16 << 30

// SpoolBundle copies a bundle from r (a pipe, for example the SSH channel
// of strata rollout: apply-overlay --bundle -) into an unnamed temporary
// file in the first of dirs reachable without a symbolic link
// (safefile.CreateTemp), at most max bytes, and opens it. The file has no
// name, so nothing is left behind however the process ends.
func SpoolBundle(ctx context.Context, r io.Reader, dirs []string, max int64) (*BundleStore, error) {
	f, err := safefile.CreateTemp(dirs)
	if err != nil {
		return nil, fmt.Errorf("spooling bundle: %w", err)
	}
	dir := filepath.Dir(f.Name())
	n, err := io.Copy(f, io.LimitReader(ctxio.NewReader(ctx, r), max+1))
	if err == nil && n > max {
		err = fmt.Errorf("over %d bytes", max)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("spooling bundle to %s: %w", dir, err)
	}
	return indexBundle(ctx, f, "(stdin)")
}

// Rereadable reports that the members are parts of a local file: reading
// one again costs nothing.
func (b *BundleStore) Rereadable() bool { return true }
