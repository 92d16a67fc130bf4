package overlay_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	. "github.com/strata-dev/strata/overlay"
)

// TestSegmentedIndex grows a line past two sealed segments and reads it
// back every way a reader does: the index stays small, publishing reads
// no segment, and nodes, audits and bundles see the whole line.
func TestSegmentedIndex(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	total := 2*manifests.SegmentSize + manifests.LineageWindow + 10
	for i := 1; i <= total; i++ {
		f.create("1.0."+strconv.Itoa(i), f.change("/etc/app/conf.d/v.conf", "v "+strconv.Itoa(i)+"\n"))
	}
	r, err := repo.Open(f.repo, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &r.Index.Lines[0]
	if len(l.Segments) != 2 || len(l.Overlays) != total-2*manifests.SegmentSize {
		t.Fatalf("%d segments and %d inline overlays, want 2 and %d", len(l.Segments), len(l.Overlays), total-2*manifests.SegmentSize)
	}
	if l.Head().Version != "1.0."+strconv.Itoa(total) {
		t.Fatalf("head %s", l.Head().Version)
	}
	if fi, err := os.Stat(filepath.Join(f.repo, "index.json")); err != nil || fi.Size() > 128<<10 {
		t.Fatalf("index of %d bytes (%v)", fi.Size(), err)
	}

	// The whole line: an audit of the repository, and a node at the
	// image (before every segment) catching up part of the way.
	if a, err := VerifyRepo(ctx, f.repo, nil); err != nil || !a.OK() {
		t.Fatalf("verify-sequence --repo: %v %+v", err, a)
	}
	root := f.provision()
	through := "1.0." + strconv.Itoa(manifests.SegmentSize+3) // inside the second segment
	if _, err := Apply(ctx, root, Source{Repo: f.repo, Through: through}, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := VerifyNode(ctx, root, f.repo, true)
	if err != nil || !a.OK() || a.Behind != total-manifests.SegmentSize-3 {
		t.Fatalf("node audit: %v behind %d %+v", err, a.Behind, a)
	}

	// A bundle from a version inside a segment carries the segments;
	// one from the inline part does not need them.
	out := filepath.Join(t.TempDir(), "b.tar")
	n, err := repo.WriteBundle(ctx, r, "", through, "1.0."+strconv.Itoa(manifests.SegmentSize+6), out)
	if err != nil || n != 3 {
		t.Fatalf("bundle: %d overlays, %v", n, err)
	}
	bs, err := repo.OpenBundle(out)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	rep, err := Apply(ctx, root, Source{Repo: out, Store: bs, Through: bs.Info.To}, ApplyOptions{})
	if err != nil || len(rep.Plans) != 3 {
		t.Fatalf("apply --bundle: %v", err)
	}
	if _, err := repo.Refresh(f.repo, f.key, 0); err != nil {
		t.Fatalf("repo refresh: %v", err)
	}
	r2, err := repo.Open(f.repo, nil)
	if err != nil || len(r2.Index.Lines[0].Segments) != 2 {
		t.Fatalf("after refresh: %v", err)
	}

	// A tampered segment: readers that need it refuse it; publishing at
	// the head, which never reads one, goes on.
	seg := filepath.Join(f.repo, r2.Index.Lines[0].Segments[0].File)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := f.provision()
	before := snap(t, fresh)
	if _, err := Apply(ctx, fresh, Source{Repo: f.repo}, ApplyOptions{}); !errors.Is(err, repo.ErrTampered) {
		t.Fatalf("apply through a tampered segment = %v, want ErrTampered", err)
	}
	assertUnchanged(t, fresh, before)
	if a, err := VerifyRepo(ctx, f.repo, nil); err != nil || a.OK() {
		t.Fatalf("verify-sequence --repo passed a tampered segment: %v", err)
	}
	f.create("1.0."+strconv.Itoa(total+1), f.change("/etc/app/conf.d/v.conf", "next\n"))
}
