package repo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/suggest"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Chain is a line of a repository, verified: its image, its overlays up to
// a version, and the tree state and service catalog they fold to.
type Chain struct {
	Repo     *Repo
	Line     *manifests.Line
	Image    *Image
	Overlays []*archive.Archive
	// Fold is the image with the overlays as layers; State is its tree,
	// after the last overlay of the chain.
	Fold    *tree.Fold
	State   tree.State
	Catalog manifests.Catalog
	// Keys are the keys the line trusts after the chain's last element:
	// its image's, changed by the key rotations among its overlays.
	Keys *sign.KeySet

	// fromState marks a chain loaded from the line's head state
	// (LoadHead): Overlays is empty, and the head and lineage are the
	// index's.
	fromState bool
	// mu guards loading the line's segments (OverlayAt).
	mu sync.Mutex
}

// Len returns the number of overlays of the chain: those it opened, or,
// for a chain from a head state, those of its line.
func (c *Chain) Len() int {
	if !c.fromState {
		return len(c.Overlays)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.Line.Segments)*manifests.SegmentSize + len(c.Line.Overlays)
}

// OverlayAt returns the chain's i-th overlay (0: the first after the
// image): opened already, or, for a chain from a head state, opened from
// the line's index (its segments loaded when i lies in them), its file
// checked against the index but its signature not (what vouches for
// content read from it is the head state's digest). Safe for concurrent
// use.
func (c *Chain) OverlayAt(ctx context.Context, i int) (*archive.Archive, error) {
	if !c.fromState {
		return c.Overlays[i], nil
	}
	c.mu.Lock()
	sealed := len(c.Line.Segments) * manifests.SegmentSize
	if i < sealed {
		if err := c.Repo.Expand(ctx, c.Line); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		sealed = 0
	}
	ref := c.Line.Overlays[i-sealed]
	c.mu.Unlock()
	return OpenIndexed(ctx, c.Repo, ref, sign.AnyKey())
}

// Head returns the chain's last element.
func (c *Chain) Head() manifests.Ref {
	if c.fromState {
		return c.Line.Head()
	}
	if n := len(c.Overlays); n > 0 {
		a := c.Overlays[n-1]
		return manifests.Ref{Version: a.Manifest.Version, Digest: a.Digest}
	}
	return manifests.Ref{Version: c.Image.Manifest.Version, Digest: c.Image.Digest}
}

// Lineage returns every element of the chain as refs, image first; for
// a chain from a head state whose line has segments not loaded, only the
// inline overlays (at least a lineage window of them, as Validate of the
// index demands).
func (c *Chain) Lineage() []manifests.Ref {
	out := []manifests.Ref{{Version: c.Image.Manifest.Version, Digest: c.Image.Digest}}
	if c.fromState && len(c.Line.Segments) > 0 {
		out = out[:0]
	}
	if c.fromState {
		for _, o := range c.Line.Overlays {
			out = append(out, manifests.Ref{Version: o.Version, Digest: o.Digest})
		}
		return out
	}
	for _, a := range c.Overlays {
		out = append(out, manifests.Ref{Version: a.Manifest.Version, Digest: a.Digest})
	}
	return out
}

// LoadChain opens line (empty: the repository's only line) of r and
// verifies its image and overlays up to and including version through
// (empty: the head): file digests against the index, signatures against
// trust (nil: the image's keys) as the key rotations of the chain change
// it, parent links, and each overlay's tree digest against the folded
// state.
func LoadChain(ctx context.Context, r *Repo, line, through string, trust *sign.KeySet) (*Chain, error) {
	l, err := pickLine(r, line)
	if err != nil {
		return nil, err
	}
	if err := r.Expand(ctx, l); err != nil {
		return nil, err
	}
	im, err := r.Image(ctx, l, trust)
	if err != nil {
		return nil, err
	}
	keys, err := im.Trust()
	if err != nil {
		return nil, err
	}
	if trust == nil {
		trust = keys
	}
	c := &Chain{Repo: r, Line: l, Image: im, Fold: tree.Base(im.Manifest.Files), Catalog: im.Manifest.Catalog, Keys: keys}
	if c.State, err = c.Fold.State(); err != nil {
		return nil, err
	}
	if through != "" {
		if _, err := manifests.ParseVersion(through); err != nil {
			return nil, err
		}
		if !l.HasVersion(through) {
			return nil, fmt.Errorf("line %s has no version %s: %w", l.Name, through, ErrSequence)
		}
	}
	if through == l.Image.Version {
		return c, nil
	}
	for _, ref := range l.Overlays {
		a, err := OpenIndexed(ctx, r, ref, trust)
		if err != nil {
			return nil, err
		}
		if err := c.push(a); err != nil {
			return nil, err
		}
		if trust, err = trust.After(a.Manifest); err != nil {
			return nil, err
		}
		if c.Keys, err = c.Keys.After(a.Manifest); err != nil {
			return nil, err
		}
		if ref.Version == through {
			break
		}
	}
	return c, nil
}

// push folds a onto the chain after checking it continues the chain.
func (c *Chain) push(a *archive.Archive) error {
	m := a.Manifest
	if head := c.Head(); m.Parent != head {
		return fmt.Errorf("overlay %s: parent %s (%s) is not the line head %s (%s): %w", m.Version, m.Parent.Version, m.Parent.Digest, head.Version, head.Digest, ErrSequence)
	}
	fold := tree.Append(c.Fold, a.Layer())
	next, err := fold.State()
	if err != nil {
		return fmt.Errorf("overlay %s: %w", m.Version, tree.Cause(err))
	}
	if got := next.Digest(); got != m.TreeDigest {
		return fmt.Errorf("overlay %s: folded tree digest %s, manifest says %s: %w", m.Version, got, m.TreeDigest, archive.ErrPayload)
	}
	c.Fold, c.State = fold, next
	if m.Catalog != nil {
		c.Catalog = *m.Catalog
	}
	c.Overlays = append(c.Overlays, a)
	return nil
}

func pickLine(r *Repo, line string) (*manifests.Line, error) {
	if line == "" {
		if len(r.Index.Lines) != 1 {
			names := make([]string, 0, len(r.Index.Lines))
			for _, l := range r.Index.Lines {
				names = append(names, l.Name)
			}
			return nil, fmt.Errorf("repository %s has %d lines (%s); name one with --line: %w", r.Dir, len(r.Index.Lines), strings.Join(names, ", "), ErrAmbiguousLine)
		}
		return &r.Index.Lines[0], nil
	}
	return FindLine(r.Index, line)
}

// FindLine is Index.Find for a line an operator named (--line): a name
// the index lacks is refused with the closest one it has.
func FindLine(x *manifests.Index, name string) (*manifests.Line, error) {
	l, err := x.Find(name)
	if err != nil {
		names := make([]string, 0, len(x.Lines))
		for _, l := range x.Lines {
			names = append(names, l.Name)
		}
		if near := suggest.Nearest(name, names, 2, 1); len(near) > 0 {
			return nil, fmt.Errorf("%w; did you mean %s?", err, near[0])
		}
	}
	return l, err
}

// OpenMember opens the overlay that index entry ref names in store s (see
// archive.OpenFrom); it does not check the entry's digests (LoadChain
// does).
func OpenMember(ctx context.Context, s Store, ref manifests.OverlayRef, trust *sign.KeySet) (*archive.Archive, error) {
	open := func(ctx context.Context) (io.ReadCloser, error) {
		rc, size, err := s.Open(ctx, ref.File)
		if err != nil {
			return nil, fmt.Errorf("opening overlay: %w", err)
		}
		if size >= 0 && size != ref.Size {
			rc.Close()
			return nil, fmt.Errorf("overlay %s is %d bytes, the index says %d: %w", ref.File, size, ref.Size, ErrTampered)
		}
		return limitedCloser{io.LimitReader(rc, ref.Size), rc}, nil
	}
	return archive.OpenFrom(ctx, ref.File, open, trust)
}

// limitedCloser reads at most what the index records and closes the member.
type limitedCloser struct {
	io.Reader
	io.Closer
}

// OpenIndexed opens the overlay an index entry names and checks the file
// and manifest digests the index records.
func OpenIndexed(ctx context.Context, r *Repo, ref manifests.OverlayRef, trust *sign.KeySet) (*archive.Archive, error) {
	p := r.Path(ref.File)
	sum, _, err := HashMember(ctx, r.Store, ref.File, ref.Size)
	if err != nil {
		return nil, err
	}
	if sum != ref.SHA256 {
		return nil, fmt.Errorf("overlay %s: file sha256 %s, index says %s: %w", p, sum, ref.SHA256, ErrTampered)
	}
	a, err := OpenMember(ctx, r.Store, ref, trust)
	if err != nil {
		return nil, err
	}
	if a.Digest != ref.Digest || a.Manifest.Version != ref.Version {
		return nil, fmt.Errorf("overlay %s: manifest %s %s, index says %s %s: %w", p, a.Manifest.Version, a.Digest, ref.Version, ref.Digest, ErrTampered)
	}
	return a, nil
}

// LineVersions opens the repository at loc (a directory or URL, its
// index verified against the line images' keys) and returns the name of
// line (empty: the only line) and its elements, image first, head last.
func LineVersions(ctx context.Context, loc, line string) (string, []manifests.Ref, error) {
	st, err := Locate(loc)
	if err != nil {
		return "", nil, err
	}
	r, err := OpenStore(ctx, st, nil)
	if err != nil {
		return "", nil, err
	}
	l, err := pickLine(r, line)
	if err != nil {
		return "", nil, err
	}
	if err := r.Expand(ctx, l); err != nil {
		return "", nil, err
	}
	out := []manifests.Ref{{Version: l.Image.Version, Digest: l.Image.Digest}}
	for _, o := range l.Overlays {
		out = append(out, manifests.Ref{Version: o.Version, Digest: o.Digest})
	}
	return l.Name, out, nil
}
