package tree

import (
	"archive/tar"
	"bytes"
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
// as they stream. Contents a later layer's patches were made against (its
// Needs) are kept in memory as they stream by, until that layer has been
// read. It does not close tw.
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
	k := newKeeper(f.layers)
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
			if content, err = k.keep(orig[e.Path], content); err != nil {
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
		err := l.Payload(ctx, k.base, func(e manifests.Entry, r io.Reader) error {
			r, err := k.keep(e, r)
			if err != nil {
				return err
			}
			if fe, ok := final[e.Path]; !ok || fe != e || e.Type != manifests.TypeFile || done[e.Path] {
				return nil
			}
			return put(e, r)
		})
		if err != nil {
			return err
		}
		k.release(l.Needs)
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

// keeper holds, by SHA-256, the contents that layers' patches were made
// against, from when they stream by until the last layer needing them
// has been read.
type keeper struct {
	need map[string]int
	kept map[string][]byte
}

func newKeeper(layers []Layer) *keeper {
	k := &keeper{need: map[string]int{}, kept: map[string][]byte{}}
	for _, l := range layers {
		for _, sum := range l.Needs {
			k.need[sum]++
		}
	}
	return k
}

// keep returns a reader of r's content, keeping a copy when a patch needs
// it (and e is small enough to be a patch's base at all).
func (k *keeper) keep(e manifests.Entry, r io.Reader) (io.Reader, error) {
	if e.Type != manifests.TypeFile || k.need[e.SHA256] == 0 || k.kept[e.SHA256] != nil || e.Size > manifests.MaxPatchTarget {
		return r, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, e.Size+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", e.Path, err)
	}
	k.kept[e.SHA256] = b
	return bytes.NewReader(b), nil
}

func (k *keeper) base(_ context.Context, path, sum string) ([]byte, error) {
	if b, ok := k.kept[sum]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("folding %s: %w: no content with sha256 %s below it", path, errNoContent, sum)
}

func (k *keeper) release(sums []string) {
	for _, sum := range sums {
		if k.need[sum]--; k.need[sum] <= 0 {
			delete(k.kept, sum)
		}
	}
}
