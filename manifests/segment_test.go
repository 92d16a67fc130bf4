package manifests_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// segmentedLine returns a line of two segments and a lineage window of
// inline overlays, with the segments' contents.
func segmentedLine() (manifests.Line, []manifests.Segment) {
	l := manifests.Line{Name: "demo", Image: manifests.ImageRef{Version: "1.0.0", File: "images/demo.squashfs", Digest: digestOf("1.0.0"), SHA256: digestOf("sq")[7:], Size: 4096}}
	prev := ref("1.0.0")
	var all []manifests.OverlayRef
	for i := 1; i <= 2*manifests.SegmentSize+manifests.LineageWindow; i++ {
		v := fmt.Sprintf("1.0.%d", i)
		all = append(all, manifests.OverlayRef{Version: v, File: "overlays/" + v, Digest: digestOf(v), Size: 100, Parent: prev})
		prev = ref(v)
	}
	var segs []manifests.Segment
	for s := 0; s < 2; s++ {
		part := all[s*manifests.SegmentSize : (s+1)*manifests.SegmentSize]
		segs = append(segs, manifests.Segment{Schema: manifests.Schema, Kind: manifests.KindSegment, Line: "demo", Overlays: part})
		last := part[len(part)-1]
		l.Segments = append(l.Segments, manifests.SegmentRef{File: fmt.Sprintf("segments/demo-%d.json", s), SHA256: digestOf("s")[7:], Size: 100, Last: manifests.Ref{Version: last.Version, Digest: last.Digest}})
	}
	l.Overlays = all[2*manifests.SegmentSize:]
	return l, segs
}

func TestSegmentedLineValidates(t *testing.T) {
	l, segs := segmentedLine()
	x := validIndex()
	x.Lines = []manifests.Line{l}
	if err := x.Validate(); err != nil {
		t.Fatalf("valid segmented index: %v", err)
	}
	if got := l.Head().Version; got != fmt.Sprintf("1.0.%d", 2*manifests.SegmentSize+manifests.LineageWindow) {
		t.Errorf("head %s", got)
	}
	if l.After(ref("1.0.0")) != -1 || l.After(l.Segments[1].Last) != 0 || l.After(ref(l.Overlays[3].Version)) != 4 {
		t.Error("After does not place the image, the end of the segments and an inline overlay")
	}
	prev := ref("1.0.0")
	for i := range segs {
		if err := segs[i].Validate("demo", l.Segments[i], prev); err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		prev = l.Segments[i].Last
	}

	for name, mutate := range map[string]func(l *manifests.Line){
		"too few inline":        func(l *manifests.Line) { l.Overlays = l.Overlays[:manifests.LineageWindow-1] },
		"inline skips":          func(l *manifests.Line) { l.Overlays[0].Parent = ref("1.0.5") },
		"segments out of order": func(l *manifests.Line) { l.Segments[0], l.Segments[1] = l.Segments[1], l.Segments[0] },
		"unsafe segment file":   func(l *manifests.Line) { l.Segments[0].File = "../x" },
		"segment without size":  func(l *manifests.Line) { l.Segments[1].Size = 0 },
		"segment bad sha256":    func(l *manifests.Line) { l.Segments[1].SHA256 = "xyz" },
	} {
		l, _ := segmentedLine()
		mutate(&l)
		x := validIndex()
		x.Lines = []manifests.Line{l}
		if err := x.Validate(); err == nil {
			t.Errorf("%s: the index validates", name)
		}
	}
	for name, mutate := range map[string]func(s *manifests.Segment){
		"another line":    func(s *manifests.Segment) { s.Line = "other" },
		"short":           func(s *manifests.Segment) { s.Overlays = s.Overlays[1:] },
		"broken chain":    func(s *manifests.Segment) { s.Overlays[5].Parent = ref("1.0.1") },
		"wrong kind":      func(s *manifests.Segment) { s.Kind = manifests.KindIndex },
		"overlay unsized": func(s *manifests.Segment) { s.Overlays[9].Size = 0 },
	} {
		_, segs := segmentedLine()
		l, _ := segmentedLine()
		mutate(&segs[1])
		if err := segs[1].Validate("demo", l.Segments[1], l.Segments[0].Last); !errors.Is(err, manifests.ErrInvalid) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	// A segment that chains but ends elsewhere than its ref says.
	l2, segs2 := segmentedLine()
	l2.Segments[1].Last = ref("1.0.200")
	if err := segs2[1].Validate("demo", l2.Segments[1], l2.Segments[0].Last); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("segment ending elsewhere: %v", err)
	}
}
