package manifests

import (
	"fmt"
	"strings"
	"time"
)

// Index is a repository's signed table of contents.
type Index struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
	// Serial grows by one with every publication (every signed index),
	// so a node can refuse an older index replayed to it (rollback).
	Serial uint64 `json:"serial"`
	// Expires is when the index stops being current (RFC 3339, UTC): a
	// mirror that stops publishing cannot keep nodes on an old index
	// forever (freeze). `strata repo refresh` re-signs it.
	Expires string `json:"expires"`
	Lines   []Line `json:"lines"`
}

// Freshness errors: an authentic index that must not be believed current.
var (
	// ErrIndexRollback reports an index older than one a node accepted.
	ErrIndexRollback = Rejection("index: older than one accepted before (rollback)")
	// ErrIndexExpired reports an index past its expiry.
	ErrIndexExpired = Rejection("index: expired (freeze)")
	// ErrIndexSerialJump reports an index whose serial is further past
	// the one a node accepted than MaxSerialStep.
	ErrIndexSerialJump = Rejection("index: serial too far past the one accepted (freeze)")
)

// MaxSerialStep is how far past the serial a node accepted the next index
// it accepts may be: 16,777,216 publications, 32 years at one a minute.
// A key holder who signs an index with a serial far ahead (2^62) would
// otherwise make every later index of the real publisher look old to the
// nodes that took it, for good.
const MaxSerialStep = 1 << 24

// MaxSerial bounds an index's serial (JSON numbers above 2^53 lose
// precision in many readers).
const MaxSerial = 1 << 53

// CheckFresh refuses an index that has expired at now, or whose serial is
// below minSerial (the highest a node accepted; 0 for none).
func (x *Index) CheckFresh(now time.Time, minSerial uint64) error {
	if x.Serial < minSerial {
		return fmt.Errorf("%w: serial %d, this node accepted serial %d already; a mirror or an attacker replays an old index", ErrIndexRollback, x.Serial, minSerial)
	}
	if minSerial > 0 && x.Serial-minSerial > MaxSerialStep {
		return fmt.Errorf("%w: serial %d is %d past serial %d, which this node accepted, and at most %d is taken; a signing key may be used to freeze nodes (docs/security.md)", ErrIndexSerialJump, x.Serial, x.Serial-minSerial, minSerial, MaxSerialStep)
	}
	if exp := x.ExpiresAt(); !now.Before(exp) {
		return fmt.Errorf("%w: serial %d expired at %s (now %s); the repository is not being refreshed (strata repo refresh) or a mirror serves a stale copy", ErrIndexExpired, x.Serial, exp.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// ExpiresAt returns Expires as a time (Validate checked its form).
func (x *Index) ExpiresAt() time.Time {
	t, _ := time.Parse(time.RFC3339, x.Expires)
	return t
}

// Line is one image and the overlays that follow it, in order.
type Line struct {
	Name  string   `json:"name"`
	Image ImageRef `json:"image"`
	// Segments hold the line's oldest overlays, SegmentSize each, sealed
	// in files the index pins (see SegmentSize); Overlays are the ones
	// after them. A reader that needs the whole line loads them first
	// (repo.Expand); then Segments is empty and Overlays holds all.
	Segments []SegmentRef `json:"segments,omitempty"`
	Overlays []OverlayRef `json:"overlays"`
	// Sealed keeps the segment refs of a line whose segments were loaded
	// (Segments is then empty), for what must name the files themselves
	// (bundles, pushes). Never encoded.
	Sealed []SegmentRef `json:"-"`
	// Upgrades are the line's later whole images, for nodes to upgrade
	// to (strata upgrade --repo): images of newer recipe versions, in
	// increasing version, and regenerated images of its overlays (Head
	// set), in the order they were published.
	Upgrades []ImageRef `json:"upgrades,omitempty"`
	// State, when set, is the line's head state (see HeadState): what
	// the chain folds to at its head, so that publishing the next
	// overlay need not read the chain. One for an older version (an
	// index another tool appended to) is not used.
	State *StateRef `json:"state,omitempty"`
}

// StateRef locates a line's head state in a repository.
type StateRef struct {
	// Version is the head the state describes.
	Version string `json:"version"`
	File    string `json:"file"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
}

// ImageRef locates an image in a repository.
type ImageRef struct {
	Version string `json:"version"`
	// File is the squashfs path relative to the repository; the manifest
	// sits beside it with the .image.json suffix.
	File string `json:"file"`
	// Digest is the digest of the image manifest.
	Digest string `json:"digest"`
	// SHA256 is the digest of the squashfs file itself.
	SHA256 string `json:"sha256"`
	// Size is the squashfs file's length: readers stop there.
	Size int64 `json:"size"`
	// Head is set on a line's regenerated images (Line.Upgrades only):
	// the last overlay folded in.
	Head *Ref `json:"head,omitempty"`
	// Boot, when set, is the image's boot image: a unified kernel image
	// signed for Secure Boot that boots it on any node of the line (see
	// BootImageCmdline), for nodes that boot signed images to upgrade
	// themselves.
	Boot *BootImageRef `json:"boot,omitempty"`
}

// OverlayRef locates an overlay in a repository.
type OverlayRef struct {
	Version string `json:"version"`
	File    string `json:"file"`
	// Digest is the digest of the overlay manifest.
	Digest string `json:"digest"`
	// SHA256 is the digest of the overlay archive file.
	SHA256 string `json:"sha256"`
	// Size is the archive file's length: readers stop there.
	Size   int64 `json:"size"`
	Parent Ref   `json:"parent"`
}

// Head returns the line's newest element: its last overlay, or the image.
func (l *Line) Head() Ref {
	if n := len(l.Overlays); n > 0 {
		return Ref{Version: l.Overlays[n-1].Version, Digest: l.Overlays[n-1].Digest}
	}
	if n := len(l.Segments); n > 0 {
		return l.Segments[n-1].Last
	}
	return Ref{Version: l.Image.Version, Digest: l.Image.Digest}
}

// HasVersion reports whether the line's image or one of its overlays has
// version v. Overlays sealed in segments count only once loaded.
func (l *Line) HasVersion(v string) bool {
	if l.Image.Version == v {
		return true
	}
	for _, o := range l.Overlays {
		if o.Version == v {
			return true
		}
	}
	return false
}

// SegmentRefs returns the line's segment refs as the signed index names
// them, loaded or not.
func (l *Line) SegmentRefs() []SegmentRef {
	if len(l.Segments) > 0 {
		return l.Segments
	}
	return l.Sealed
}

// After returns the index in Overlays of the overlay that follows head,
// or -1 when head is not the image nor one of Overlays (it may be sealed
// in a segment).
func (l *Line) After(head Ref) int {
	if head.Digest == l.Image.Digest && len(l.Segments) == 0 {
		return 0
	}
	for i, o := range l.Overlays {
		if o.Digest == head.Digest {
			return i + 1
		}
	}
	if n := len(l.Segments); n > 0 && l.Segments[n-1].Last.Digest == head.Digest {
		return 0
	}
	return -1
}

// Find returns the line named name.
func (x *Index) Find(name string) (*Line, error) {
	for i := range x.Lines {
		if x.Lines[i].Name == name {
			return &x.Lines[i], nil
		}
	}
	names := make([]string, 0, len(x.Lines))
	for _, l := range x.Lines {
		names = append(names, l.Name)
	}
	return nil, fmt.Errorf("%w: repository has no line %q (its lines: %s)", ErrInvalid, name, strings.Join(names, ", "))
}

// Validate checks the index: known kind, valid lines, parent links that
// chain from each image and strictly increasing versions.
func (x *Index) Validate() error {
	if x.Schema != Schema || x.Kind != KindIndex {
		return fmt.Errorf("%w: not an index (schema %d, kind %q)", ErrInvalid, x.Schema, x.Kind)
	}
	if x.Serial == 0 {
		return fmt.Errorf("%w: index without a serial (an index from before freshness: re-sign it with strata repo refresh)", ErrInvalid)
	}
	if x.Serial > MaxSerial {
		return fmt.Errorf("%w: index serial %d is over %d", ErrInvalid, x.Serial, uint64(MaxSerial))
	}
	if _, err := time.Parse(time.RFC3339, x.Expires); err != nil {
		return fmt.Errorf("%w: index expiry %q is not RFC 3339", ErrInvalid, x.Expires)
	}
	seen := map[string]bool{}
	for _, l := range x.Lines {
		if err := ValidLine(l.Name); err != nil {
			return err
		}
		if seen[l.Name] {
			return fmt.Errorf("%w: duplicate line %q", ErrInvalid, l.Name)
		}
		seen[l.Name] = true
		if _, err := ParseVersion(l.Image.Version); err != nil {
			return err
		}
		if l.Image.Size <= 0 {
			return fmt.Errorf("%w: line %s: image without its size (an index from before sizes: re-sign it with strata repo refresh)", ErrInvalid, l.Name)
		}
		if b := l.Image.Boot; b != nil {
			if err := b.validate(); err != nil {
				return fmt.Errorf("line %s: image %s: %w", l.Name, l.Image.Version, err)
			}
		}
		prev, err := validSegments(&l)
		if err != nil {
			return err
		}
		if _, err := chainRefs(l.Name, prev, l.Overlays); err != nil {
			return err
		}
		if err := validUpgrades(&l); err != nil {
			return err
		}
		if st := l.State; st != nil {
			if err := ValidPath(st.File); err != nil {
				return fmt.Errorf("line %s: state: %w", l.Name, err)
			}
			if !l.HasVersion(st.Version) || !validHex(st.SHA256, 64) || st.Size <= 0 || st.Size > MaxManifestSize {
				return fmt.Errorf("%w: line %s: state for %s, sha256 %q, size %d", ErrInvalid, l.Name, st.Version, st.SHA256, st.Size)
			}
		}
	}
	return nil
}

// validUpgrades checks a line's upgrade images: well-formed refs under
// images/, none the line's own image or listed twice, recipe images in
// increasing versions above the line's image, regenerated ones built
// from it (their version BASE+head.V) through distinct heads.
func validUpgrades(l *Line) error {
	files := map[string]bool{l.Image.File: true}
	if l.Image.Boot != nil {
		files[l.Image.Boot.File] = true
	}
	digests := map[string]bool{l.Image.Digest: true}
	heads := map[string]bool{}
	last := l.Image.Version
	for _, u := range l.Upgrades {
		bad := func(why string) error {
			return fmt.Errorf("%w: line %s: upgrade image %q (%s): %s", ErrInvalid, l.Name, u.Version, u.File, why)
		}
		if _, err := ParseVersion(u.Version); err != nil {
			return fmt.Errorf("line %s: upgrade image: %w", l.Name, err)
		}
		if err := ValidPath(u.File); err != nil || !strings.HasPrefix(u.File, "images/") {
			return bad("not a file under images/")
		}
		if !ValidDigest(u.Digest) || !validHex(u.SHA256, 64) || u.Size <= 0 {
			return bad("digest, sha256 or size missing or malformed")
		}
		if files[u.File] || digests[u.Digest] {
			return bad("listed twice")
		}
		files[u.File], digests[u.Digest] = true, true
		if b := u.Boot; b != nil {
			if err := b.validate(); err != nil {
				return fmt.Errorf("line %s: upgrade image %s: %w", l.Name, u.Version, err)
			}
			if files[b.File] {
				return bad("its boot image " + b.File + " is listed twice")
			}
			files[b.File] = true
		}
		if u.Head == nil {
			if CompareVersions(u.Version, last) <= 0 {
				return bad("not newer than " + last)
			}
			last = u.Version
			continue
		}
		if _, err := ParseVersion(u.Head.Version); err != nil || !ValidDigest(u.Head.Digest) {
			return bad("malformed head")
		}
		if u.Version != l.Image.Version+"+head."+u.Head.Version {
			return bad("a regenerated image's version is the line image's and its head's: " + l.Image.Version + "+head." + u.Head.Version)
		}
		if heads[u.Head.Digest] {
			return bad("a second regenerated image through " + u.Head.Version)
		}
		heads[u.Head.Digest] = true
	}
	return nil
}
