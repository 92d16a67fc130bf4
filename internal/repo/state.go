package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// StateDir holds the repository's head states.
const StateDir = "states"

// LoadHead returns line (empty: the only line) of r at its head for a
// publisher: from the line's head state when the index records one for
// the head (bound by its SHA-256 to the signed index, and checked against
// the head overlay's manifest), without reading the chain; else from the
// chain (LoadChain). A chain from a state has no opened overlays; Content
// opens them as it needs.
func LoadHead(ctx context.Context, r *Repo, line string) (*Chain, error) {
	l, err := pickLine(r, line)
	if err != nil {
		return nil, err
	}
	if l.State == nil || l.State.Version != l.Head().Version {
		return LoadChain(ctx, r, line, "", nil)
	}
	raw, err := ReadMember(ctx, r.Store, l.State.File, l.State.Size)
	if errors.Is(err, manifests.ErrTooLarge) {
		err = fmt.Errorf("head state %s is longer than the %d bytes the index says: %w", l.State.File, l.State.Size, ErrTampered)
	}
	if err != nil {
		return nil, fmt.Errorf("line %s: head state: %w", l.Name, err)
	}
	if sum := manifests.Digest(raw); sum != manifests.DigestPrefix+l.State.SHA256 || int64(len(raw)) != l.State.Size {
		return nil, fmt.Errorf("line %s: head state %s does not match the index: %w", l.Name, l.State.File, ErrTampered)
	}
	var st manifests.HeadState
	if err := manifests.Decode(raw, &st); err != nil {
		return nil, fmt.Errorf("line %s: head state: %w", l.Name, err)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("line %s: head state: %w", l.Name, err)
	}
	if st.Line != l.Name || st.Head != l.Head() || st.Image != (manifests.Ref{Version: l.Image.Version, Digest: l.Image.Digest}) {
		return nil, fmt.Errorf("line %s: head state is for %s at %s, the index's head is %s: %w", l.Name, st.Line, st.Head.Version, l.Head().Version, ErrTampered)
	}
	im, err := r.Image(ctx, l, nil)
	if err != nil {
		return nil, err
	}
	keys, err := sign.NewKeySet(toBytes(st.Keys)...)
	if err != nil {
		return nil, fmt.Errorf("line %s: head state keys: %w", l.Name, err)
	}
	c := &Chain{Repo: r, Line: l, Image: im, Catalog: st.Catalog, Keys: keys, fromState: true}
	c.Fold = tree.Base(st.Files)
	if c.State, err = c.Fold.State(); err != nil {
		return nil, err
	}
	// The head overlay's own manifest must promise the same tree.
	if n := len(l.Overlays); n > 0 {
		a, err := OpenIndexed(ctx, r, l.Overlays[n-1], sign.AnyKey())
		if err != nil {
			return nil, err
		}
		if a.Manifest.TreeDigest != st.TreeDigest {
			return nil, fmt.Errorf("line %s: head state tree %s, head overlay %s says %s: %w", l.Name, st.TreeDigest, a.Manifest.Version, a.Manifest.TreeDigest, ErrTampered)
		}
	} else if st.TreeDigest != im.Manifest.TreeDigest {
		return nil, fmt.Errorf("line %s: head state tree %s, image says %s: %w", l.Name, st.TreeDigest, im.Manifest.TreeDigest, ErrTampered)
	}
	return c, nil
}

// SaveWithState records the head state of line l (after an overlay the
// caller appended: its tree, catalog and keys) and saves the index signed
// with key. The new state is written first; the one it replaces is removed
// once the index no longer names it; on failure the new one is removed.
func (r *Repo) SaveWithState(ctx context.Context, l *manifests.Line, st *manifests.HeadState, key *sign.Key) error {
	raw, err := manifests.Encode(st)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s/%s-%s.json", StateDir, l.Name, st.Head.Version)
	if err := Dir(r.Dir).Put(ctx, name, bytes.NewReader(raw)); err != nil {
		return err
	}
	old := l.State
	sum := manifests.Digest(raw)
	l.State = &manifests.StateRef{Version: st.Head.Version, File: name, SHA256: sum[len(manifests.DigestPrefix):], Size: int64(len(raw))}
	if err := r.Save(ctx, key); err != nil {
		l.State = old
		_ = os.Remove(r.Path(name))
		return err
	}
	if old != nil && old.File != name {
		_ = os.Remove(r.Path(old.File))
	}
	return nil
}
