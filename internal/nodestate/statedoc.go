package nodestate

import (
	"errors"
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// checked is a document of node state that checks itself once read.
type checked interface{ Validate() error }

// readDoc reads the JSON document at rel below the node root (at most
// limit bytes, never through a link), strictly decoded and validated;
// nil when there is none. what names it in errors.
func readDoc[T any, P interface {
	*T
	checked
}](n Node, rel string, limit int64, what string) (*T, error) {
	if err := n.CheckState(); err != nil {
		return nil, err
	}
	p := n.Path(rel)
	raw, err := safefile.Read(p, limit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	var d T
	if err := manifests.Decode(raw, &d); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, p, err)
	}
	if err := P(&d).Validate(); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, p, err)
	}
	return &d, nil
}

// writeDoc validates d and writes it at rel below the node root,
// atomically.
func writeDoc(n Node, rel string, d checked) error {
	if err := d.Validate(); err != nil {
		return err
	}
	b, err := manifests.Encode(d)
	if err != nil {
		return err
	}
	return safefile.WriteAtomic(n.Path(rel), b, 0o644)
}

// removeDoc removes the document at rel below the node root, if any.
func removeDoc(n Node, rel, what string) error {
	if err := os.Remove(n.Path(rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", what, err)
	}
	return safefile.SyncDir(n.StateDir())
}
