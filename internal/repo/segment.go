package repo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"

	"github.com/strata-dev/strata/manifests"
)

// SegmentDir holds the repository's sealed index segments.
const SegmentDir = "segments"

// Expand loads the segments of line l (one of r's index) and puts their
// overlays before l's inline ones, so that l.Overlays is the whole line.
// Each segment must be the file the index pins (size and SHA-256) and
// continue the line where the one before it ends. Expand does nothing for
// a line without segments.
func (r *Repo) Expand(ctx context.Context, l *manifests.Line) error {
	if len(l.Segments) == 0 {
		return nil
	}
	all := make([]manifests.OverlayRef, 0, len(l.Segments)*manifests.SegmentSize+len(l.Overlays))
	prev := manifests.Ref{Version: l.Image.Version, Digest: l.Image.Digest}
	for _, ref := range l.Segments {
		seg, err := readSegment(ctx, r.Store, l.Name, ref, prev)
		if err != nil {
			return err
		}
		all = append(all, seg.Overlays...)
		prev = ref.Last
	}
	l.Overlays = append(all, l.Overlays...)
	l.Sealed, l.Segments = l.Segments, nil
	return nil
}

// Find returns where the overlay after head is in l.Overlays, loading
// l's segments first when head is not among the inline overlays; -1
// when head is not in the line at all.
func (r *Repo) Find(ctx context.Context, l *manifests.Line, head manifests.Ref) (int, error) {
	if i := l.After(head); i >= 0 || len(l.Segments) == 0 {
		return i, nil
	}
	if err := r.Expand(ctx, l); err != nil {
		return -1, err
	}
	return l.After(head), nil
}

func readSegment(ctx context.Context, s Store, line string, ref manifests.SegmentRef, parent manifests.Ref) (*manifests.Segment, error) {
	raw, err := ReadMember(ctx, s, ref.File, ref.Size)
	if errors.Is(err, manifests.ErrTooLarge) {
		err = fmt.Errorf("segment %s is longer than the %d bytes the index says: %w", ref.File, ref.Size, ErrTampered)
	}
	if err != nil {
		return nil, fmt.Errorf("line %s: %w", line, err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != ref.SHA256 || int64(len(raw)) != ref.Size {
		return nil, fmt.Errorf("line %s: segment %s does not match the index: %w", line, ref.File, ErrTampered)
	}
	var seg manifests.Segment
	if err := manifests.Decode(raw, &seg); err != nil {
		return nil, fmt.Errorf("line %s: segment %s: %w", line, ref.File, err)
	}
	if err := seg.Validate(line, ref, parent); err != nil {
		return nil, err
	}
	return &seg, nil
}

// seal moves the oldest inline overlays of each line of the index into
// segment files, SegmentSize at a time, while SealAt or more are inline.
// Boundaries fall every SegmentSize overlays from a line's image, so a
// line that was expanded and is saved again seals into the same files,
// byte for byte. A file's name carries its SHA-256, and a file is never
// rewritten: the one an index names stays what it was.
func (r *Repo) seal(ctx context.Context, p Putter) error {
	for i := range r.Index.Lines {
		l := &r.Index.Lines[i]
		for len(l.Overlays) >= manifests.SealAt {
			seg := manifests.Segment{Schema: manifests.Schema, Kind: manifests.KindSegment, Line: l.Name, Overlays: l.Overlays[:manifests.SegmentSize]}
			raw, err := manifests.Encode(&seg)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(raw)
			hexsum := hex.EncodeToString(sum[:])
			name := fmt.Sprintf("%s/%s-%d-%.16s.json", SegmentDir, l.Name, len(l.Segments), hexsum)
			ref := manifests.SegmentRef{File: name, SHA256: hexsum, Size: int64(len(raw)), Last: manifests.Ref{Version: seg.Overlays[len(seg.Overlays)-1].Version, Digest: seg.Overlays[len(seg.Overlays)-1].Digest}}
			have, err := ReadMember(ctx, r.Store, name, ref.Size)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				if err := p.Put(ctx, name, bytes.NewReader(raw)); err != nil {
					return fmt.Errorf("sealing segment %s: %w", name, err)
				}
			case errors.Is(err, manifests.ErrTooLarge) || err == nil && !bytes.Equal(have, raw):
				return fmt.Errorf("sealing segment %s: a different file of that name exists: %w", name, ErrTampered)
			case err != nil:
				return fmt.Errorf("sealing segment %s: %w", name, err)
			}
			l.Segments = append(l.Segments, ref)
			l.Overlays = append([]manifests.OverlayRef{}, l.Overlays[manifests.SegmentSize:]...)
		}
		if len(l.Segments) > 0 {
			l.Sealed = nil
		}
	}
	return nil
}
