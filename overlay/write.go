package overlay

import (
	"archive/tar"
	"context"
	"io"
	"time"

	"github.com/strata-dev/strata/internal/compress"
	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// writeArchive writes a complete overlay archive to w: the manifest, its
// signature, then each entry of m with content from open (for a file m
// ships as a patch, open gets the member's entry, whose size and SHA-256
// are the patch's, and returns the patch).
func writeArchive(w io.Writer, raw, sig []byte, m *manifests.OverlayManifest, open tree.Opener, algo compress.Algorithm) (err error) {
	created, _ := time.Parse(time.RFC3339, m.Created)
	mtime := created.Unix()
	cw, err := compress.NewWriter(w, algo)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = cw.Close() // a compressor process ends with it
		}
	}()
	tw := tar.NewWriter(cw)
	for _, mem := range []struct {
		name string
		data []byte
	}{{ManifestMember, raw}, {SignatureMember, sig}} {
		h := &tar.Header{Name: mem.name, Mode: 0644, Size: int64(len(mem.data)), Typeflag: tar.TypeReg, ModTime: created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(mem.data); err != nil {
			return err
		}
	}
	for _, e := range m.Entries {
		if p, ok := m.PatchFor(e.Path); ok {
			e.Size, e.SHA256 = p.Size, p.SHA256
		}
		if err := tree.WriteEntry(tw, e, open, mtime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return cw.Close()
}

// cancellable wraps open so that reading what it opens stops with ctx's
// error once ctx is done: a long write (a large file compressed) ends
// promptly on SIGINT and its temporary file is removed.
func cancellable(ctx context.Context, open tree.Opener) tree.Opener {
	return func(e manifests.Entry) (io.ReadCloser, error) {
		rc, err := open(e)
		if err != nil {
			return nil, err
		}
		return ctxio.NewReadCloser(ctx, rc), nil
	}
}
