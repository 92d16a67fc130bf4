package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// TestSegmentedIndex grows a line past two sealed segments and reads it
// back every way a reader does: the index stays small, publishing reads
// no segment, and nodes, audits and bundles see the whole line.
func TestSegmentedIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (publishes a line long enough to segment): make test runs it")
	}
	ctx := context.Background()
	f := fixture.New(t)
	total := 2*manifests.SegmentSize + manifests.LineageWindow + 10
	for i := 1; i <= total; i++ {
		f.Create("1.0."+strconv.Itoa(i), f.Change("/etc/app/conf.d/v.conf", "v "+strconv.Itoa(i)+"\n"))
	}
	r, err := repo.Open(context.Background(), f.Repo, nil)
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
	if fi, err := os.Stat(filepath.Join(f.Repo, "index.json")); err != nil || fi.Size() > 128<<10 {
		t.Fatalf("index of %d bytes (%v)", fi.Size(), err)
	}

	// The whole line: an audit of the repository, and a node at the
	// image (before every segment) catching up part of the way.
	if a, err := overlay.VerifyRepo(ctx, f.Repo, nil); err != nil || !a.OK() {
		t.Fatalf("verify-sequence --repo: %v %+v", err, a)
	}
	root := f.Provision()
	through := "1.0." + strconv.Itoa(manifests.SegmentSize+3) // inside the second segment
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: f.Repo, Through: through}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	a, err := nodetest.Verify(ctx, root, node.VerifyOptions{Repo: f.Repo, Files: true})
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
	bs, err := repo.OpenBundle(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	rep, err := nodetest.Apply(ctx, root, node.Source{Repo: out, Store: bs, Through: bs.Info.To}, node.ApplyOptions{}, node.Options{})
	if err != nil || len(rep.Plans) != 3 {
		t.Fatalf("apply --bundle: %v", err)
	}

	// The command's path: the line verified whole (overlay.LoadChain loads the
	// segments into the index it holds), then a bundle for a fresh node
	// at the image, which must carry the segments the index names.
	r3, err := repo.Open(context.Background(), f.Repo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := overlay.LoadChain(ctx, r3, "", "", nil); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(t.TempDir(), "fresh.tar")
	if _, err := repo.WriteBundle(ctx, r3, "", "1.0.0", "1.0.2", out2); err != nil {
		t.Fatal(err)
	}
	bs2, err := repo.OpenBundle(context.Background(), out2)
	if err != nil {
		t.Fatal(err)
	}
	defer bs2.Close()
	if _, err := nodetest.Apply(ctx, f.Provision(), node.Source{Repo: out2, Store: bs2, Through: bs2.Info.To}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatalf("a fresh node applying a bundle from the image: %v", err)
	}

	// Sealing is deterministic and never rewrites: a save of the whole
	// line (refresh reads it whole to follow rotations) leaves every
	// segment file as it was.
	segDir := filepath.Join(f.Repo, repo.SegmentDir)
	seen := map[string]int64{}
	des, _ := os.ReadDir(segDir)
	for _, de := range des {
		fi, _ := de.Info()
		seen[de.Name()] = fi.ModTime().UnixNano()
	}
	if _, err := repo.Refresh(context.Background(), f.Repo, f.Key, 0); err != nil {
		t.Fatalf("repo refresh: %v", err)
	}
	des, _ = os.ReadDir(segDir)
	for _, de := range des {
		fi, _ := de.Info()
		if seen[de.Name()] != fi.ModTime().UnixNano() {
			t.Errorf("refresh wrote segment %s", de.Name())
		}
	}
	if len(des) != 2 {
		t.Errorf("%d segment files after refresh, want 2", len(des))
	}
	r2, err := repo.Open(context.Background(), f.Repo, nil)
	if err != nil || len(r2.Index.Lines[0].Segments) != 2 {
		t.Fatalf("after refresh: %v", err)
	}

	// A tampered segment: readers that need it refuse it; publishing at
	// the head, which never reads one, goes on.
	seg := filepath.Join(f.Repo, r2.Index.Lines[0].Segments[0].File)
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := f.Provision()
	before := fixture.Snap(t, fresh)
	if _, err := nodetest.Apply(ctx, fresh, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); !errors.Is(err, repo.ErrTampered) {
		t.Fatalf("apply through a tampered segment = %v, want ErrTampered", err)
	}
	fixture.AssertUnchanged(t, fresh, before)
	if a, err := overlay.VerifyRepo(ctx, f.Repo, nil); err != nil || a.OK() {
		t.Fatalf("verify-sequence --repo passed a tampered segment: %v", err)
	}
	f.Create("1.0."+strconv.Itoa(total+1), f.Change("/etc/app/conf.d/v.conf", "next\n"))
}

// TestSegmentsSurviveRotation: after a key rotation the index is signed
// by a key the image does not list, so opening it follows the rotations
// through the whole line; the index the reader gets still names its
// segments (bundles and pushes carry them), and publishing goes on.
func TestSegmentsSurviveRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (publishes a line long enough to segment): make test runs it")
	}
	ctx := context.Background()
	f := fixture.New(t)
	for i := 1; i <= manifests.SealAt; i++ {
		f.Create("1.0."+strconv.Itoa(i), f.Change("/etc/app/conf.d/v.conf", "v "+strconv.Itoa(i)+"\n"))
	}
	b, bPub := newKey(t, f.Dir, "b")
	if _, err := overlay.RotateKeys(ctx, f.Repo, f.Key, overlay.RotateOptions{Add: [][]byte{bPub}, Revoke: []string{f.Key.ID()}, IndexKey: b}); err != nil {
		t.Fatal(err)
	}
	r, err := repo.Open(context.Background(), f.Repo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Index.Lines[0].Segments); n != 1 {
		t.Fatalf("the opened index names %d segments, want 1", n)
	}
	if _, err := overlay.Create(ctx, f.Repo, b, f.Change("/etc/app/conf.d/v.conf", "after\n"), overlay.CreateOptions{Version: "2.0.0"}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "b.tar")
	if _, err := repo.WriteBundle(ctx, r, "", "1.0.0", "1.0.1", out); err != nil {
		t.Fatal(err)
	}
	bs, err := repo.OpenBundle(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	rc, _, err := bs.Open(ctx, r.Index.Lines[0].SegmentRefs()[0].File)
	if err != nil {
		t.Fatalf("the bundle from the image does not carry the segment: %v", err)
	}
	rc.Close()
}
