package tree

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/manifests"
)

// errNoContent reports a file of the folded tree that neither the base
// stream nor any layer supplied.
var errNoContent = errors.New("no content for file")

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
	defer k.close()
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

// keeper keeps, by SHA-256, the contents that layers' patches were made
// against, from when they stream by until the last layer needing them
// has been read: in files of a temporary directory, so a fold that
// patches many large files holds one of them in memory at a time.
type keeper struct {
	need map[string]int
	kept map[string]string // sum -> file
	dir  string
	scr  *scratch.Dir
}

func newKeeper(layers []Layer) *keeper {
	k := &keeper{need: map[string]int{}, kept: map[string]string{}}
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
	if e.Type != manifests.TypeFile || k.need[e.SHA256] == 0 || k.kept[e.SHA256] != "" || e.Size > manifests.MaxPatchTarget {
		return r, nil
	}
	if k.dir == "" {
		scr, err := scratch.MkdirTemp("fold")
		if err != nil {
			return nil, fmt.Errorf("keeping patch bases: %w", err)
		}
		k.dir, k.scr = scr.Path, scr
	}
	f, err := os.CreateTemp(k.dir, "base-")
	if err != nil {
		return nil, fmt.Errorf("keeping patch bases: %w", err)
	}
	_, err = io.Copy(f, io.LimitReader(r, e.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("keeping %s: %w", e.Path, err)
	}
	k.kept[e.SHA256] = f.Name()
	return &lazyFile{path: f.Name()}, nil
}

func (k *keeper) base(_ context.Context, path, sum string) ([]byte, error) {
	if p, ok := k.kept[sum]; ok {
		return os.ReadFile(p)
	}
	return nil, fmt.Errorf("folding %s: %w: no content with sha256 %s below it", path, errNoContent, sum)
}

func (k *keeper) release(sums []string) {
	for _, sum := range sums {
		if k.need[sum]--; k.need[sum] <= 0 {
			if p, ok := k.kept[sum]; ok {
				_ = os.Remove(p)
				delete(k.kept, sum)
			}
		}
	}
}

// close removes what the keeper still holds.
func (k *keeper) close() {
	if k.dir != "" {
		_ = k.scr.RemoveAll()
	}
}

// lazyFile reads a file, opened at the first read and closed at its end:
// one never read holds nothing open.
type lazyFile struct {
	path string
	f    *os.File
	done bool
}

func (r *lazyFile) Read(p []byte) (int, error) {
	if r.done {
		return 0, io.EOF
	}
	if r.f == nil {
		f, err := os.Open(r.path)
		if err != nil {
			return 0, err
		}
		r.f = f
	}
	n, err := r.f.Read(p)
	if err != nil {
		r.f.Close()
		r.done = true
	}
	return n, err
}
