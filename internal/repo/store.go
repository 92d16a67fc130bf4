package repo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Store is where a repository's files live: a local directory today, an
// HTTP server or an OCI registry later. Member names are slash paths
// relative to the repository, such as "index.json" or
// "overlays/demo-1.0.1.overlay.tar.zst"; a name that fs.ValidPath refuses
// is manifests.ErrUnsafePath. Every implementation passes the suite in
// internal/repo/storetest.
type Store interface {
	// Open opens member name for reading; size is its length, and the
	// reader yields at most size bytes. A store that cannot tell the
	// length before reading (an HTTP response without one) says -1, and
	// callers bound what they read themselves. A missing member is
	// fs.ErrNotExist; anything but a regular file (a device, a FIFO, a
	// directory, a symlink, a path that leaves the repository) is refused
	// without being read.
	Open(ctx context.Context, name string) (r io.ReadCloser, size int64, err error)
}

// Putter is a Store that can be written, for the commands that change a
// repository.
type Putter interface {
	Store
	// Put stores the content of r as member name, replacing it
	// atomically: a reader sees the old member or the new one.
	Put(ctx context.Context, name string, r io.Reader) error
	// Remove deletes member name; a missing one is fs.ErrNotExist. A
	// publisher takes back with it what it put before a later step
	// failed.
	Remove(ctx context.Context, name string) error
}

// Exists reports whether s has something at member name: a member, or
// anything a store refuses to read there (a directory, a symlink, a
// device), which a publisher must not write over either.
func Exists(ctx context.Context, s Store, name string) (bool, error) {
	rc, _, err := s.Open(ctx, name)
	switch {
	case err == nil:
		rc.Close()
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, ErrNotRegular):
		return true, nil
	}
	return false, err
}

// PutHashed is p.Put of member name with the content of r, hashing it as
// it is written: the hex SHA-256 and the length of what was stored.
func PutHashed(ctx context.Context, p Putter, name string, r io.Reader) (string, int64, error) {
	h := sha256.New()
	cr := &countingReader{r: r}
	if err := p.Put(ctx, name, io.TeeReader(cr, h)); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), cr.n, nil
}

// PutWritten is PutHashed with content that write produces as it goes
// (an archive compressed on the fly): nothing is staged in between, and a
// write that fails fails the Put, so the member is not replaced.
func PutWritten(ctx context.Context, p Putter, name string, write func(io.Writer) error) (string, int64, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err) // nil: the reader sees io.EOF
		done <- err
	}()
	sum, n, err := PutHashed(ctx, p, name, pr)
	// A Put that stopped early leaves the writer blocked on the pipe.
	pr.CloseWithError(errPutEnded)
	if werr := <-done; werr != nil && !errors.Is(werr, errPutEnded) {
		err = werr
	}
	if err != nil {
		return "", 0, err
	}
	return sum, n, nil
}

// errPutEnded is what a writer of PutWritten sees once Put returned.
var errPutEnded = errors.New("put ended before the content did")

// countingReader counts what passes through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ErrNotRegular reports a repository member that is not a regular file
// (of the manifests.ErrRejected class).
var ErrNotRegular = manifests.Rejection("member is not a regular file")

// ReadMember reads member name of s whole, refusing one over limit bytes
// with manifests.ErrTooLarge.
func ReadMember(ctx context.Context, s Store, name string, limit int64) ([]byte, error) {
	rc, size, err := s.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > limit {
		return nil, fmt.Errorf("reading %s: %w: %d bytes (limit %d)", name, manifests.ErrTooLarge, size, limit)
	}
	// A store that does not know the size (an HTTP response without a
	// length) is held to the limit as it reads.
	b, err := manifests.ReadLimited(rc, limit)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return b, nil
}

// readDoc reads a signed document and its detached signature; a missing
// signature is returned as nil, for the verifier to refuse.
func readDoc(ctx context.Context, s Store, name string) (raw, sig []byte, err error) {
	limit := int64(manifests.MaxManifestSize)
	if name == IndexFile {
		limit = manifests.MaxIndexSize
	}
	if raw, err = ReadMember(ctx, s, name, limit); err != nil {
		return nil, nil, err
	}
	sig, err = ReadMember(ctx, s, SigPath(name), sign.MaxSignatureSize)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	return raw, sig, nil
}

// HashMember returns the hex SHA-256 of member name of s and its length,
// which must be want, the size the signed index records: a member of
// another size is ErrTampered before a byte of it is read, and no more
// than want bytes are ever read.
func HashMember(ctx context.Context, s Store, name string, want int64) (string, int64, error) {
	rc, size, err := s.Open(ctx, name)
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", name, err)
	}
	defer rc.Close()
	if size >= 0 && size != want {
		return "", 0, fmt.Errorf("%s is %d bytes, the index says %d: %w", name, size, want, ErrTampered)
	}
	// One byte past want shows a member longer than its (unknown) size.
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(rc, want+1))
	switch {
	case err == nil && n > want:
		err = fmt.Errorf("%s is longer than the %d bytes the index says: %w", name, want, ErrTampered)
	case err == nil && n < want:
		err = fmt.Errorf("%d of %d bytes: %w", n, want, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Rereadable is a store whose members cost nothing to read again: local
// files, as in a directory or a bundle. Readers that read members more
// than once take such a store as it is; any other they read through a
// Spool (see ForRereads).
type Rereadable interface {
	Store
	// Rereadable reports whether a member read again costs no transfer.
	Rereadable() bool
}

// ForRereads returns s ready to have its members read more than once:
// s itself when it is Rereadable, else a Spool over it (in the system's
// temporary directory), with the function that releases the spool.
func ForRereads(s Store) (Store, func(), error) {
	if r, ok := s.(Rereadable); ok && r.Rereadable() {
		return s, func() {}, nil
	}
	sp, err := NewSpool(s, "")
	if err != nil {
		return nil, nil, err
	}
	return sp, func() { _ = sp.Close() }, nil
}

// localDir is a store whose members are the files of one directory.
type localDir interface {
	localDir() string
}

// LocateForRereads is Locate (unless st is given) and ForRereads: the
// store of loc ready to have its members read more than once.
func LocateForRereads(loc string, st Store) (Store, func(), error) {
	if st == nil {
		var err error
		if st, err = Locate(loc); err != nil {
			return nil, nil, err
		}
	}
	return ForRereads(st)
}

// hasMemberBelow reports whether name is a directory of a store's members
// (some member's name starts with name/): stores whose members are not
// files in directories refuse such a name as not a regular file, as a
// directory store does.
func hasMemberBelow[V any](members map[string]V, name string) bool {
	for m := range members {
		if strings.HasPrefix(m, name+"/") {
			return true
		}
	}
	return false
}
