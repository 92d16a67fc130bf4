package repo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// openCounter counts the segment files a store opens.
type openCounter struct {
	Store
	segments atomic.Int64
}

func (c *openCounter) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if strings.HasPrefix(name, "segments/") {
		c.segments.Add(1)
	}
	return c.Store.Open(ctx, name)
}

// Issue 25, item 7: an index signed by a key the reader does not trust
// could name 1,024 segments of 256 KiB, and following the key rotations
// loaded every one (256 MiB read, 474 MB of memory) before the first
// overlay failed to verify. Now segments are read one at a time, those
// ending before the reader's head not at all, and the walk stops at the
// first manifest that does not verify: one segment read.
func TestFollowUnverifiedReadsOneSegment(t *testing.T) {
	dir := t.TempDir()
	digest := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	image := manifests.Ref{Version: "1.0.0", Digest: digest("image")}
	l := &manifests.Line{Name: "demo", Image: manifests.ImageRef{Version: image.Version, Digest: image.Digest}}
	prev, n := image, 0
	const segments = 40
	if err := os.MkdirAll(filepath.Join(dir, "segments"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k := range segments {
		seg := manifests.Segment{Schema: manifests.Schema, Kind: manifests.KindSegment, Line: "demo"}
		for range manifests.SegmentSize {
			n++
			v := fmt.Sprintf("1.0.%d", n)
			o := manifests.OverlayRef{Version: v, File: "overlays/demo-" + v + ".overlay.tar.zst", Digest: digest(v), SHA256: strings.Repeat("a", 64), Size: 100, Parent: prev}
			seg.Overlays = append(seg.Overlays, o)
			prev = manifests.Ref{Version: v, Digest: o.Digest}
		}
		raw, err := manifests.Encode(&seg)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("segments/demo-%d.json", k)
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		l.Segments = append(l.Segments, manifests.SegmentRef{File: name, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(raw)), Last: prev})
	}
	p := filepath.Join(t.TempDir(), "k")
	if err := sign.Generate(p); err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKey(p + ".key")
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := k.PublicKeySet()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		from manifests.Ref
		want error
	}{
		{"a reader at the image", image, errNoOverlay},
		{"a reader in the tenth segment", manifests.Ref{Version: fmt.Sprintf("1.0.%d", 9*manifests.SegmentSize+5), Digest: digest(fmt.Sprintf("1.0.%d", 9*manifests.SegmentSize+5))}, errNoOverlay},
		{"a reader the line does not hold", manifests.Ref{Version: "1.0.300", Digest: digest("elsewhere")}, errHeadNotInLine},
	} {
		st := &openCounter{Store: Dir(dir)}
		r := &Repo{Dir: dir, Store: st}
		lc := *l
		_, err := r.followUnverified(ctx, &lc, c.from, trust)
		if err == nil || (c.want == errHeadNotInLine) != errors.Is(err, errHeadNotInLine) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if got := st.segments.Load(); got != 1 {
			t.Errorf("%s: %d of %d segments read, want 1", c.name, got, segments)
		}
	}
}

// errNoOverlay stands for "the first overlay cannot be opened" in the cases.
var errNoOverlay = errors.New("the first overlay after the reader does not open")
