package manifests

import "fmt"

// KindState tags a head state.
const KindState = "state"

// HeadState is what a line's chain folds to at its head: the tree, the
// service catalog and the keys the line trusts there. A repository keeps
// the newest one (states/LINE-VERSION.json), bound to the signed index by
// its SHA-256, so that publishing the next overlay reads it instead of
// the whole chain. Nodes never use it; verify-sequence --repo checks it
// against the chain.
type HeadState struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
	Line   string `json:"line"`
	// Head is the last element of the chain it describes; Image the
	// line's image.
	Head  Ref `json:"head"`
	Image Ref `json:"image"`
	// TreeDigest covers Files.
	TreeDigest string   `json:"tree_digest"`
	Keys       []string `json:"keys"`
	Catalog    Catalog  `json:"catalog"`
	Files      []Entry  `json:"files"`
}

// Validate checks the state's form: schema, line, refs, entries, keys,
// catalog, and that Files digest to TreeDigest.
func (s *HeadState) Validate() error {
	if s.Schema != Schema || s.Kind != KindState {
		return fmt.Errorf("%w: not a head state (schema %d, kind %q)", ErrInvalid, s.Schema, s.Kind)
	}
	if err := ValidLine(s.Line); err != nil {
		return err
	}
	for _, r := range []Ref{s.Head, s.Image} {
		if _, err := ParseVersion(r.Version); err != nil {
			return err
		}
		if !ValidDigest(r.Digest) {
			return fmt.Errorf("%w: head state: digest %q", ErrInvalid, r.Digest)
		}
	}
	if err := validEntries(s.Files); err != nil {
		return err
	}
	if err := s.Catalog.Validate(); err != nil {
		return err
	}
	if err := checkKeyFiles(s.Keys, s.Files); err != nil {
		return err
	}
	if got := TreeDigest(s.Files); got != s.TreeDigest {
		return fmt.Errorf("%w: head state files digest to %s, it says %s", ErrInvalid, got, s.TreeDigest)
	}
	return nil
}
