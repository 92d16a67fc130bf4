package tree

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/strata-dev/strata/manifests"
)

// errNoContent reports a file of the folded tree that neither the base
// stream nor any layer supplied.
var errNoContent = errors.New("tree: no content for file")

// WriteTar writes the folded tree to tw with modification time mtime:
// directories first; then the base tree's files that survive unchanged,
// with contents from base, a reader of the base tree's own tar stream (nil:
// none); then the layers' files, streaming each layer's payload once, in
// order, and taking each file from the first payload that carries its final
// entry; then the symlinks. Contents are checked against the final entries
// as they stream. It does not close tw.
func (f *Fold) WriteTar(ctx context.Context, tw *tar.Writer, base *Reader, mtime int64) error {
	final, err := f.State()
	if err != nil {
		return err
	}
	entries := final.Entries()
	for _, e := range entries {
		if e.Type == manifests.TypeDir {
			if err := WriteEntry(tw, e, nil, mtime); err != nil {
				return err
			}
		}
	}
	done := map[string]bool{}
	put := func(e manifests.Entry, r io.Reader) error {
		done[e.Path] = true
		return WriteEntry(tw, e, func(manifests.Entry) (io.ReadCloser, error) { return io.NopCloser(r), nil }, mtime)
	}
	if base != nil {
		orig := NewState(f.base)
		for {
			e, content, err := base.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			fe, ok := final[e.Path]
			if !ok || fe.Type != manifests.TypeFile || e.Type != manifests.TypeFile || orig[e.Path].SHA256 != fe.SHA256 || done[e.Path] {
				continue
			}
			if err := put(fe, content); err != nil {
				return err
			}
		}
	}
	for _, l := range f.layers {
		if l.Payload == nil {
			continue
		}
		err := l.Payload(ctx, func(e manifests.Entry, r io.Reader) error {
			if fe, ok := final[e.Path]; !ok || fe != e || e.Type != manifests.TypeFile || done[e.Path] {
				return nil
			}
			return put(e, r)
		})
		if err != nil {
			return err
		}
	}
	for _, e := range entries {
		if e.Type == manifests.TypeDir || done[e.Path] {
			continue
		}
		err := WriteEntry(tw, e, func(manifests.Entry) (io.ReadCloser, error) { return nil, errNoContent }, mtime)
		if err != nil {
			return fmt.Errorf("folding %s: %w", e.Path, err)
		}
	}
	return nil
}
