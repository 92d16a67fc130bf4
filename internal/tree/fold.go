package tree

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/strata-dev/strata/manifests"
)

// Payload streams a layer's members in the order of its entries: fn gets
// every entry, with the content of files. Each member is checked against
// its entry by the time fn is called for the next one (the last at the
// end), so what fn did must be discarded when Payload fails.
//
// A layer may ship files as patches against the content its path had
// below it: Payload asks bases for that content (by path and SHA-256)
// and gives fn the rebuilt file. bases may be nil for a layer whose Needs
// is empty.
type Payload func(ctx context.Context, bases Bases, fn func(e manifests.Entry, r io.Reader) error) error

// Bases returns the content path has, with SHA-256 sum (bare hex), in the
// tree below a layer: what the layer's patch for path was made against.
// The payload checks the content's digest itself.
type Bases func(ctx context.Context, path, sum string) ([]byte, error)

// Layer is one change to a tree, as an overlay makes it: paths deleted
// (each with everything below it), then entries added or replaced.
type Layer struct {
	// Name identifies the layer in errors, such as "overlay 1.0.2".
	Name    string
	Entries []manifests.Entry
	Deletes []string
	// Payload streams the contents of Entries; nil when no content is
	// needed (folding states only).
	Payload Payload
	// Needs lists the SHA-256 sums of the contents the layer's patches
	// were made against, which its Payload asks bases for.
	Needs []string
}

// Fold is a base tree with layers applied in order, in the manner of
// go-containerregistry's mutate.Append: Append returns a new Fold and
// nothing is computed until State is asked for, once; the result is
// cached. A Fold is safe for concurrent use.
type Fold struct {
	base   []manifests.Entry
	layers []Layer
	// prev is the fold this one extends by its last layer; it is dropped
	// once the state is computed.
	prev *Fold

	once  sync.Once
	state State
	err   error
}

// Base returns the fold of a tree with no layers: the tree of entries.
func Base(entries []manifests.Entry) *Fold { return &Fold{base: entries} }

// Append returns f with layers applied after its own, f unchanged.
func Append(f *Fold, layers ...Layer) *Fold {
	for _, l := range layers {
		f = &Fold{base: f.base, layers: append(f.layers[:len(f.layers):len(f.layers)], l), prev: f}
	}
	return f
}

// Layers returns the fold's layers, oldest first.
func (f *Fold) Layers() []Layer { return f.layers }

// BaseEntries returns the base tree's entries.
func (f *Fold) BaseEntries() []manifests.Entry { return f.base }

// State returns the folded tree. It fails when a layer does not fit the
// tree below it (see State.Apply) with a *LayerError naming the layer.
// The state is shared: callers must not change it.
func (f *Fold) State() (State, error) {
	f.once.Do(func() {
		if f.prev == nil {
			f.state = NewState(f.base)
			return
		}
		below, err := f.prev.State()
		if err != nil {
			f.err = err
			return
		}
		l := f.layers[len(f.layers)-1]
		if f.state, err = below.Apply(l.Entries, l.Deletes); err != nil {
			f.err = &LayerError{Layer: l.Name, Err: err}
		}
		f.prev = nil
	})
	return f.state, f.err
}

// LayerError reports a layer that does not fit the tree it is folded onto.
type LayerError struct {
	Layer string
	Err   error
}

func (e *LayerError) Error() string { return "folding " + e.Layer + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *LayerError) Unwrap() error { return e.Err }

// Cause returns the error a layer failed with, without the layer's name,
// for callers that fold one layer at a time and name it themselves; other
// errors are returned as they are.
func Cause(err error) error {
	if le, ok := errors.AsType[*LayerError](err); ok {
		return le.Err
	}
	return err
}
