package tree

import (
	"fmt"
	"slices"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// State is a tree as a set of entries keyed by path. It is the model of a
// node's tree that overlays are computed and checked against.
type State map[string]manifests.Entry

// NewState builds a State from entries.
func NewState(entries []manifests.Entry) State {
	s := make(State, len(entries))
	for _, e := range entries {
		s[e.Path] = e
	}
	return s
}

// Entries returns the state's entries sorted by path.
func (s State) Entries() []manifests.Entry {
	out := make([]manifests.Entry, 0, len(s))
	for _, e := range s {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b manifests.Entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Digest returns the tree digest of the state.
func (s State) Digest() string { return manifests.TreeDigest(s.Entries()) }

// Clone returns a copy of the state.
func (s State) Clone() State {
	out := make(State, len(s))
	for p, e := range s {
		out[p] = e
	}
	return out
}

// Apply returns a new state with deletes removed (each with everything
// below it) and entries added or replaced, in that order; s is unchanged.
// A changed entry that replaces a directory with a non-directory drops the
// directory's contents. It fails when an entry's parent directory is
// missing or is not a directory, or when a deleted path does not exist, so
// a fold never produces a tree with holes.
func (s State) Apply(entries []manifests.Entry, deletes []string) (State, error) {
	out := s.Clone()
	for _, d := range deletes {
		if err := out.Delete(d); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		if err := out.Put(e); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Put adds or replaces e in place, with the checks Apply makes.
func (s State) Put(e manifests.Entry) error {
	if old, ok := s[e.Path]; ok && old.Type == manifests.TypeDir && e.Type != manifests.TypeDir {
		s.removeTree(e.Path)
	}
	if parent := manifests.Parent(e.Path); parent != "" {
		pe, ok := s[parent]
		if !ok {
			return fmt.Errorf("adding %s: parent %s: %w", e.Path, parent, ErrNotExist)
		}
		if pe.Type != manifests.TypeDir {
			return fmt.Errorf("adding %s: parent %s is a %s, not a directory: %w", e.Path, parent, pe.Type, ErrNotDir)
		}
	}
	s[e.Path] = e
	return nil
}

// Delete removes p and everything below it in place; p must exist.
func (s State) Delete(p string) error {
	old, ok := s[p]
	if !ok {
		return fmt.Errorf("deleting %s: %w", p, ErrNotExist)
	}
	if old.Type == manifests.TypeDir {
		s.removeTree(p)
	} else {
		delete(s, p)
	}
	return nil
}

func (s State) removeTree(p string) {
	delete(s, p)
	for q := range s {
		if manifests.Within(q, p) {
			delete(s, q)
		}
	}
}
