package repo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Position is where in a line a reader stands: a node's head. A reader's
// keys are those trusted at its position; an index signed by a key that a
// rotation after that position brought in is verified by following the
// line's rotations from there (see OpenAt).
type Position struct {
	Line string
	Head manifests.Ref
}

// OpenAt is OpenStore for a reader at position at whose keys are trust.
func OpenAt(ctx context.Context, s Store, trust *sign.KeySet, at Position) (*Repo, error) {
	return open(ctx, s, trust, &at)
}

// verifyIndex checks the signature of the index raw, decoded as x. The
// index is signed by a key trusted at the head of its lines, which a
// reader behind a key rotation does not trust yet: then the overlays from
// the reader's position (at, or each line's image when at is nil) are
// followed, each manifest verified with the keys trusted before it, and
// the index verified with the keys after the last. Only manifests are read; the walk stops at the
// first overlay that does not verify or does not continue the one before,
// so what the unverified index names leads the reader to signed manifests
// only, and to one that is not at most once. Nothing else of x is used
// before its signature holds. A nil trust stands for each line's image's
// keys.
func (r *Repo) verifyIndex(ctx context.Context, raw, sig []byte, x *manifests.Index, trust *sign.KeySet, at *Position) error {
	keys, err := trust, error(nil)
	if keys == nil {
		if keys, err = imageKeys(ctx, r, x); err != nil {
			return err
		}
	}
	if r.KeyID, err = keys.VerifyFor(raw, sig, sign.IndexComment); err == nil {
		return nil
	}
	first := fmt.Errorf("index signature: %w", err)
	if !errors.Is(err, sign.ErrBadSignature) {
		return first
	}
	// Only a well-formed signature by a key the reader does not trust is
	// worth following rotations for.
	if _, err := sign.SignatureKeyID(sig); err != nil {
		return first
	}
	head := &sign.KeySet{}
	for i := range x.Lines {
		// A copy: loading its segments to follow rotations must not
		// change the index the reader gets (whose segment refs bundles
		// and pushes name, and which a publisher writes back).
		lc := x.Lines[i]
		l := &lc
		if at != nil && l.Name != at.Line {
			continue
		}
		from := manifests.Ref{Version: l.Image.Version, Digest: l.Image.Digest}
		if at != nil {
			from = at.Head
		}
		ks, err := r.followUnverified(ctx, l, from, trust)
		if errors.Is(err, errHeadNotInLine) {
			return fmt.Errorf("%w; the node's head %s (%s) is not in the index's line %s either", first, at.Head.Version, at.Head.Digest, l.Name)
		}
		if ks != nil {
			_ = head.Merge(ks, nil)
		}
		if err != nil {
			// The walk ends at the first manifest that does not hold,
			// in any line: an unverified index leads it no further.
			return fmt.Errorf("%w (following the key rotations after the trusted keys stopped: %v)", first, err)
		}
	}
	if r.KeyID, err = head.VerifyFor(raw, sig, sign.IndexComment); err != nil {
		return first
	}
	return nil
}

// HeadKeys returns the keys line l of r trusts at its head: its image's,
// changed by the key rotations among its overlays, each manifest verified
// with the keys before it (manifests only; LoadChain verifies the rest).
func HeadKeys(ctx context.Context, r *Repo, l *manifests.Line) (*sign.KeySet, error) {
	if err := r.Expand(ctx, l); err != nil {
		return nil, err
	}
	ks, err := r.followRotations(ctx, l, 0, manifests.Ref{Version: l.Image.Version, Digest: l.Image.Digest}, nil)
	if err != nil {
		return nil, fmt.Errorf("line %s: %w", l.Name, err)
	}
	return ks, nil
}

// CheckIndexKey refuses an index signed by a key the chain's line does not
// trust at the chain's last element (a key a rotation revoked): a reader
// that verified it with older keys must not take it.
func (c *Chain) CheckIndexKey() error {
	if !c.Keys.Has(c.Repo.KeyID) {
		return fmt.Errorf("the index is signed by key %s, which line %s no longer trusts at %s (trusted: %s): %w", c.Repo.KeyID, c.Line.Name, c.Head().Version, strings.Join(c.Keys.IDs(), ", "), sign.ErrBadSignature)
	}
	return nil
}

// imageKeys returns the keys the images of x's lines list.
func imageKeys(ctx context.Context, r *Repo, x *manifests.Index) (*sign.KeySet, error) {
	ks := &sign.KeySet{}
	for i := range x.Lines {
		im, err := r.Image(ctx, &x.Lines[i], nil)
		if err != nil {
			return nil, err
		}
		if err := ks.Merge(im.Trust()); err != nil {
			return nil, err
		}
	}
	return ks, nil
}

// errHeadNotInLine reports a reader's head that an index's line lacks.
var errHeadNotInLine = errors.New("the head is not in the line")

// followUnverified follows the key rotations of line l of an index whose
// signature does not hold yet, from the overlay after from (a reader's
// head, or the line's image), with the keys trust (nil: the image's). The
// index is unverified, so the work it can cause is bounded by what
// verifies: segments are read one at a time and dropped (never all of
// them at once), a segment that ends before from's version is skipped
// unread, and the walk stops at the first manifest that does not verify
// or does not continue the one before. It returns errHeadNotInLine when
// from is not in the line.
func (r *Repo) followUnverified(ctx context.Context, l *manifests.Line, from manifests.Ref, trust *sign.KeySet) (*sign.KeySet, error) {
	image := manifests.Ref{Version: l.Image.Version, Digest: l.Image.Digest}
	found := from == image
	prev := image
	walk := func(refs []manifests.OverlayRef) error {
		start := 0
		if !found {
			i := (&manifests.Line{Overlays: refs}).After(from)
			if i < 0 {
				return nil
			}
			found, start = true, i
		}
		var err error
		trust, err = r.walkManifests(ctx, &manifests.Line{Name: l.Name, Image: l.Image, Overlays: refs}, start, from, trust, func(a *archive.Archive) {
			from = manifests.Ref{Version: a.Manifest.Version, Digest: a.Digest}
		})
		return err
	}
	for _, ref := range l.Segments {
		if !found && manifests.CompareVersions(ref.Last.Version, from.Version) < 0 {
			prev = ref.Last // ends before the head: not read
			continue
		}
		seg, err := readSegment(ctx, r.Store, l.Name, ref, prev)
		if err != nil {
			return trust, err
		}
		prev = ref.Last
		if err := walk(seg.Overlays); err != nil {
			return trust, err
		}
		if !found {
			// It ends at or after the head's version and does not hold
			// it: versions only grow, so no later element does either.
			return trust, errHeadNotInLine
		}
	}
	if err := walk(l.Overlays); err != nil {
		return trust, err
	}
	if !found {
		return trust, errHeadNotInLine
	}
	return trust, nil
}

// followRotations returns the keys trusted after the overlays of l from
// position start on, starting from trust (nil: the line's image's keys).
// It returns the keys so far, and why it stopped, at the first overlay
// that does not verify or does not continue from.
func (r *Repo) followRotations(ctx context.Context, l *manifests.Line, start int, from manifests.Ref, trust *sign.KeySet) (*sign.KeySet, error) {
	return r.walkManifests(ctx, l, start, from, trust, nil)
}

// WalkManifests calls visit with each overlay of line l (segments
// loaded) in order, its manifest verified with the keys trusted before it
// (trust, nil: the image's keys, changed by the rotations among the
// overlays before) and continuing the one before. Only manifests are
// read; the walk stops with an error at the first that does not hold.
func WalkManifests(ctx context.Context, r *Repo, l *manifests.Line, trust *sign.KeySet, visit func(*archive.Archive)) error {
	if err := r.Expand(ctx, l); err != nil {
		return err
	}
	_, err := r.walkManifests(ctx, l, 0, manifests.Ref{Version: l.Image.Version, Digest: l.Image.Digest}, trust, visit)
	if err != nil {
		return fmt.Errorf("line %s: %w", l.Name, err)
	}
	return nil
}

func (r *Repo) walkManifests(ctx context.Context, l *manifests.Line, start int, from manifests.Ref, trust *sign.KeySet, visit func(*archive.Archive)) (*sign.KeySet, error) {
	if trust == nil {
		im, err := r.Image(ctx, l, nil)
		if err != nil {
			return nil, err
		}
		if trust, err = im.Trust(); err != nil {
			return nil, err
		}
	}
	for _, ref := range l.Overlays[start:] {
		a, err := OpenMember(ctx, r.Store, ref, trust)
		if err != nil {
			return trust, err
		}
		m := a.Manifest
		if m.Parent != from || a.Digest != ref.Digest || m.Version != ref.Version {
			return trust, fmt.Errorf("overlay %s does not continue %s: %w", ref.File, from.Version, ErrSequence)
		}
		if trust, err = trust.After(m); err != nil {
			return nil, err
		}
		from = manifests.Ref{Version: m.Version, Digest: a.Digest}
		if visit != nil {
			visit(a)
		}
	}
	return trust, nil
}
