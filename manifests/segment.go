package manifests

import "fmt"

// KindSegment tags a sealed segment of a line's overlay refs.
const KindSegment = "segment"

// SegmentSize is how many overlay refs a sealed segment holds. An index
// keeps its lines' newest overlays inline and seals older ones into
// segment files, so that publishing the next overlay reads and writes an
// index of bounded size however long the line grows.
const SegmentSize = 128

// Bounds of what an index may name in segments: a segment of 128 refs
// is about 50 KB, and a line of MaxSegments segments has over 130,000
// overlays. They bound what a reader loads for an index whose signature
// it has yet to verify (following key rotations).
const (
	MaxSegmentSize = 256 << 10
	MaxSegments    = 1024
)

// SealAt is the number of inline overlay refs at which a writer seals the
// oldest SegmentSize of them: what stays inline is at least
// LineageWindow, so a node whose head is within a lineage window of the
// line's head finds it without reading a segment.
const SealAt = SegmentSize + LineageWindow

// SegmentRef locates a sealed segment in a repository; the signed index
// pins it by its SHA-256 and size.
type SegmentRef struct {
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Last is the segment's last overlay: the parent of the first overlay
	// after it.
	Last Ref `json:"last"`
}

// Segment is a sealed run of SegmentSize overlay refs of a line, oldest
// first.
type Segment struct {
	Schema   int          `json:"schema"`
	Kind     string       `json:"kind"`
	Line     string       `json:"line"`
	Overlays []OverlayRef `json:"overlays"`
}

// Validate checks that s is segment ref of line after element parent:
// SegmentSize overlays of that line, each with its size, chaining from
// parent with strictly increasing versions, and ending at ref.Last.
func (s *Segment) Validate(line string, ref SegmentRef, parent Ref) error {
	if s.Schema != Schema || s.Kind != KindSegment || s.Line != line {
		return fmt.Errorf("%w: segment %s is not a segment of line %s (schema %d, kind %q, line %q)", ErrInvalid, ref.File, line, s.Schema, s.Kind, s.Line)
	}
	if len(s.Overlays) != SegmentSize {
		return fmt.Errorf("%w: segment %s holds %d overlays, not %d", ErrInvalid, ref.File, len(s.Overlays), SegmentSize)
	}
	prev, err := chainRefs(line, parent, s.Overlays)
	if err != nil {
		return fmt.Errorf("segment %s: %w", ref.File, err)
	}
	if prev != ref.Last {
		return fmt.Errorf("%w: segment %s ends at %s (%s), the index says %s (%s)", ErrInvalid, ref.File, prev.Version, prev.Digest, ref.Last.Version, ref.Last.Digest)
	}
	return nil
}

// chainRefs checks that overlays follow prev one by one (parent links,
// increasing versions, sizes) and returns the last.
func chainRefs(line string, prev Ref, overlays []OverlayRef) (Ref, error) {
	for _, o := range overlays {
		if o.Size <= 0 {
			return prev, fmt.Errorf("%w: line %s: overlay %s without its size (re-sign the index with strata repo refresh)", ErrInvalid, line, o.Version)
		}
		if o.Parent != prev {
			return prev, fmt.Errorf("%w: line %s: overlay %s names parent %s (%s), previous element is %s (%s)",
				ErrInvalid, line, o.Version, o.Parent.Version, o.Parent.Digest, prev.Version, prev.Digest)
		}
		if err := CheckGreater(o.Version, prev.Version); err != nil {
			return prev, fmt.Errorf("line %s: %w", line, err)
		}
		prev = Ref{Version: o.Version, Digest: o.Digest}
	}
	return prev, nil
}

// validSegments checks the segment refs of l and returns the element the
// inline overlays follow: the last segment's last overlay, or the image.
func validSegments(l *Line) (Ref, error) {
	prev := Ref{Version: l.Image.Version, Digest: l.Image.Digest}
	if len(l.Segments) > MaxSegments {
		return prev, fmt.Errorf("%w: line %s: %d segments (at most %d)", ErrInvalid, l.Name, len(l.Segments), MaxSegments)
	}
	for _, s := range l.Segments {
		if err := ValidPath(s.File); err != nil {
			return prev, fmt.Errorf("line %s: segment: %w", l.Name, err)
		}
		if !validHex(s.SHA256, 64) || s.Size <= 0 || s.Size > MaxSegmentSize || !ValidDigest(s.Last.Digest) {
			return prev, fmt.Errorf("%w: line %s: segment %s: sha256 %q, size %d, last %q", ErrInvalid, l.Name, s.File, s.SHA256, s.Size, s.Last.Digest)
		}
		if err := CheckGreater(s.Last.Version, prev.Version); err != nil {
			return prev, fmt.Errorf("line %s: segment %s: %w", l.Name, s.File, err)
		}
		prev = s.Last
	}
	if len(l.Segments) > 0 && len(l.Overlays) < LineageWindow {
		return prev, fmt.Errorf("%w: line %s: %d overlays after its segments, fewer than the %d a node's lineage window needs", ErrInvalid, l.Name, len(l.Overlays), LineageWindow)
	}
	return prev, nil
}
