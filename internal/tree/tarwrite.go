package tree

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/manifests"
)

// Opener returns the content of a file entry.
type Opener func(e manifests.Entry) (io.ReadCloser, error)

// DirOpener opens entries as files below the host directory root.
func DirOpener(root string) Opener {
	return func(e manifests.Entry) (io.ReadCloser, error) {
		return openNoFollow(root, e.Path)
	}
}

// WriteTar writes entries, in the order given, as a deterministic tar
// stream: PAX headers, fixed modification time mtime, numeric owners only.
// File contents come from open and are checked against each entry's size
// and SHA-256 while they stream; a mismatch fails the write. The tar
// end-of-archive marker is written; w is not closed.
func WriteTar(w io.Writer, entries []manifests.Entry, open Opener, mtime int64) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := WriteEntry(tw, e, open, mtime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finishing tar stream: %w", err)
	}
	return nil
}

// WriteEntry writes one entry (header and, for files, checked content) to
// tw.
func WriteEntry(tw *tar.Writer, e manifests.Entry, open Opener, mtime int64) error {
	if err := tw.WriteHeader(Header(e, mtime)); err != nil {
		return fmt.Errorf("writing tar header %s: %w", e.Path, err)
	}
	if e.Type != manifests.TypeFile {
		return nil
	}
	rc, err := open(e)
	if err != nil {
		return fmt.Errorf("opening %s: %w", e.Path, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := ctxio.Copy(tw, io.TeeReader(io.LimitReader(rc, e.Size+1), h))
	if err != nil {
		return fmt.Errorf("writing %s: %w", e.Path, err)
	}
	if n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return fmt.Errorf("writing %s: content changed since it was scanned (%d bytes, want %d)", e.Path, n, e.Size)
	}
	return nil
}
