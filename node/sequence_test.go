package node_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/fixture"
)

// Helpers shared by sequence, crash, rollback, restart, verify and create
// tests. They carry an "sq" prefix so they cannot collide with helpers of
// other test files in the package.

// sqLedger reads the node's ledger (which also checks its hash chain).
func sqLedger(t *testing.T, root string) *manifests.Ledger {
	t.Helper()
	l, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatalf("reading ledger: %v", err)
	}
	return l
}

// sqApplied returns the versions in effect on the node, oldest first.
func sqApplied(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, e := range sqLedger(t, root).Applied() {
		out = append(out, e.Version)
	}
	return out
}

// sqCount counts ledger records of action about version.
func sqCount(l *manifests.Ledger, action manifests.LedgerAction, version string) int {
	n := 0
	for _, e := range l.Entries {
		if e.Action == action && e.Version == version {
			n++
		}
	}
	return n
}

// sqActions lists the ledger's record actions in order.
func sqActions(l *manifests.Ledger) []string {
	var out []string
	for _, e := range l.Entries {
		out = append(out, string(e.Action)+" "+e.Version)
	}
	return out
}

// sqFindings returns the findings of kind.
func sqFindings(a *schema.Audit, kind string) []schema.Finding {
	var out []schema.Finding
	for _, f := range a.Findings {
		if f.Kind == kind {
			out = append(out, f)
		}
	}
	return out
}

// sqSecondRepo starts another repository from the fixture's image: a
// second line of development whose overlays fork from the first's.
func sqSecondRepo(f *fixture.Fixture) string {
	f.T.Helper()
	dir := filepath.Join(f.Dir, "repo2")
	if _, err := repo.Init(context.Background(), dir, f.Image, f.Key); err != nil {
		f.T.Fatal(err)
	}
	return dir
}

// sqCreateIn makes an overlay in repository dir.
func sqCreateIn(f *fixture.Fixture, dir, version string, ch overlay.Change) *overlay.Created {
	f.T.Helper()
	c, err := overlay.Create(context.Background(), dir, f.Key, ch, overlay.CreateOptions{Version: version})
	if err != nil {
		f.T.Fatalf("creating %s in %s: %v", version, dir, err)
	}
	return c
}

// sqChain creates overlays 1.0.1 .. 1.0.n, each writing its own file.
func sqChain(f *fixture.Fixture, n int) []*overlay.Created {
	f.T.Helper()
	var out []*overlay.Created
	for i := 1; i <= n; i++ {
		v := "1.0." + strconv.Itoa(i)
		out = append(out, f.Create(v, f.Change("/etc/app/conf.d/v"+strconv.Itoa(i)+".conf", "version "+v+"\n")))
	}
	return out
}

// sqSHA returns the hex SHA-256 of b.
func sqSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func sqVersions(plans []node.Plan) []string {
	var out []string
	for _, p := range plans {
		out = append(out, p.Version)
	}
	return out
}

func TestSequenceGapNamesMissingVersion(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 2)
	root := f.Provision()
	before := fixture.Snap(t, root)
	_, err := apply(root, cs[1].Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "overlay 1.0.2", "parent 1.0.1", "head is 1.0.0", "missing: 1.0.1")
	fixture.AssertUnchanged(t, root, before)
}

func TestSequenceGapNamesEveryMissingVersion(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 4)
	root := f.Provision()
	before := fixture.Snap(t, root)
	_, err := apply(root, cs[3].Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "head is 1.0.0", "parent 1.0.3", "missing: 1.0.1, 1.0.2, 1.0.3")
	fixture.AssertUnchanged(t, root, before)

	// From a later head only the versions after it are missing.
	fixture.MustApply(t, root, cs[0].Path)
	before = fixture.Snap(t, root)
	_, err = apply(root, cs[3].Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "head is 1.0.1", "missing: 1.0.2, 1.0.3")
	if strings.Contains(err.Error(), "missing: 1.0.1") {
		t.Errorf("error %q names the applied 1.0.1 as missing", err)
	}
	fixture.AssertUnchanged(t, root, before)
}

func TestSequenceReorderRefusedNothingApplied(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 4)
	root := f.Provision()
	before := fixture.Snap(t, root)

	// Files are applied oldest first whatever order they are given in
	// (TestFilesAppliedOldestFirst); a gap among them still refuses the
	// whole batch: a valid prefix is not applied.
	_, err := apply(root, cs[3].Path, cs[0].Path, cs[1].Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "1.0.4", "missing: 1.0.3")
	fixture.AssertUnchanged(t, root, before)

}

func TestSequenceForkRefused(t *testing.T) {
	f := fixture.New(t)
	ours := f.Create("1.0.1", f.Change("/etc/motd", "ours\n"))
	repo2 := sqSecondRepo(f)
	theirs1 := sqCreateIn(f, repo2, "1.0.1", f.Change("/etc/motd", "theirs\n"))
	theirs2 := sqCreateIn(f, repo2, "1.0.2", f.Change("/etc/app/app.conf", "port 82\n"))
	if ours.Digest == theirs1.Digest {
		t.Fatal("the two 1.0.1 overlays must differ for this test")
	}
	root := f.Provision()
	fixture.MustApply(t, root, ours.Path)
	before := fixture.Snap(t, root)

	_, err := apply(root, theirs2.Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "fork", "1.0.1", theirs1.Digest, ours.Digest)
	fixture.AssertUnchanged(t, root, before)

	_, err = apply(root, theirs1.Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "fork", theirs1.Digest, ours.Digest)
	fixture.AssertUnchanged(t, root, before)

	// --repo of the other line: the node's head is not in it.
	_, err = nodetest.Apply(context.Background(), root, node.Source{Repo: repo2}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, overlay.ErrSequence, "1.0.1", ours.Digest)
	fixture.AssertUnchanged(t, root, before)
}

// A descendant of a forked version is a fork too: its lineage has the
// node's head version with another digest. Reporting it as a gap would
// send the operator after a "missing" 1.0.2 that can never apply.
func TestSequenceForkDetectedThroughLineage(t *testing.T) {
	f := fixture.New(t)
	ours := f.Create("1.0.1", f.Change("/etc/motd", "ours\n"))
	repo2 := sqSecondRepo(f)
	sqCreateIn(f, repo2, "1.0.1", f.Change("/etc/motd", "theirs\n"))
	sqCreateIn(f, repo2, "1.0.2", f.Change("/etc/app/app.conf", "port 82\n"))
	theirs3 := sqCreateIn(f, repo2, "1.0.3", f.Change("/etc/app/app.conf", "port 83\n"))
	root := f.Provision()
	fixture.MustApply(t, root, ours.Path)
	before := fixture.Snap(t, root)
	_, err := apply(root, theirs3.Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "fork", "1.0.1")
	fixture.AssertUnchanged(t, root, before)
}

func TestSequenceReapplyIsNoop(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 2)
	root := f.Provision()
	fixture.MustApply(t, root, cs[0].Path)
	before := fixture.Snap(t, root)
	rep := fixture.MustApply(t, root, cs[0].Path)
	if len(rep.Plans) != 1 || !rep.Plans[0].AlreadyApplied || rep.Plans[0].Version != "1.0.1" {
		t.Fatalf("plans = %+v, want 1.0.1 already applied", rep.Plans)
	}
	if rep.To.Version != "1.0.1" || rep.From != rep.To {
		t.Errorf("report moves %v -> %v, want to stay at 1.0.1", rep.From, rep.To)
	}
	fixture.AssertUnchanged(t, root, before)

	// An applied prefix is skipped and the rest applies.
	rep = fixture.MustApply(t, root, cs[0].Path, cs[1].Path)
	if len(rep.Plans) != 2 || !rep.Plans[0].AlreadyApplied || rep.Plans[1].AlreadyApplied {
		t.Fatalf("plans = %+v, want 1.0.1 skipped and 1.0.2 applied", rep.Plans)
	}
	l := sqLedger(t, root)
	if sqCount(l, manifests.LedgerApply, "1.0.1") != 1 || sqCount(l, manifests.LedgerApply, "1.0.2") != 1 {
		t.Errorf("ledger records = %v, want one apply each", sqActions(l))
	}
}

func TestSequenceRepoAppliesAllPending(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 3)
	root := f.Provision()
	rep, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sqVersions(rep.Plans); !slices.Equal(got, []string{"1.0.1", "1.0.2", "1.0.3"}) {
		t.Fatalf("plans = %v", got)
	}
	if rep.From.Version != "1.0.0" || rep.To != (manifests.Ref{Version: "1.0.3", Digest: cs[2].Digest}) {
		t.Errorf("report %v -> %v, want 1.0.0 -> 1.0.3", rep.From, rep.To)
	}
	if got := sqApplied(t, root); !slices.Equal(got, []string{"1.0.1", "1.0.2", "1.0.3"}) {
		t.Fatalf("applied = %v", got)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.Behind != 0 || a.TreeDigest != cs[2].Manifest.TreeDigest {
		t.Errorf("audit behind %d, digest %s; want 0 and %s", a.Behind, a.TreeDigest, cs[2].Manifest.TreeDigest)
	}

	// Nothing pending: a second run changes nothing.
	before := fixture.Snap(t, root)
	rep, err = nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Plans) != 0 {
		t.Errorf("second run planned %v", sqVersions(rep.Plans))
	}
	fixture.AssertUnchanged(t, root, before)
}

func TestSequenceRepoThroughStops(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 3)
	root := f.Provision()
	rep, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo, Through: "1.0.2"}, node.ApplyOptions{}, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sqVersions(rep.Plans); !slices.Equal(got, []string{"1.0.1", "1.0.2"}) {
		t.Fatalf("plans = %v, want 1.0.1 1.0.2", got)
	}
	if got := sqApplied(t, root); !slices.Equal(got, []string{"1.0.1", "1.0.2"}) {
		t.Fatalf("applied = %v", got)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != cs[1].Manifest.TreeDigest || a.Behind != 1 {
		t.Errorf("audit digest %s behind %d, want %s and 1", a.TreeDigest, a.Behind, cs[1].Manifest.TreeDigest)
	}
	// Continuing through the head picks up where it stopped.
	rep, err = nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo, Through: "1.0.3"}, node.ApplyOptions{}, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sqVersions(rep.Plans); !slices.Equal(got, []string{"1.0.3"}) {
		t.Fatalf("plans = %v, want 1.0.3", got)
	}
}

func TestSequenceRepoThroughUnknownVersion(t *testing.T) {
	f := fixture.New(t)
	sqChain(f, 2)
	root := f.Provision()
	before := fixture.Snap(t, root)
	_, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo, Through: "1.0.7"}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, overlay.ErrSequence, "1.0.7")
	fixture.AssertUnchanged(t, root, before)
}

func TestSequenceDryRunChangesNothing(t *testing.T) {
	f := fixture.New(t)
	c1 := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	c2 := f.Create("1.0.2", overlay.Change{Deletes: []string{"/etc/motd"}})
	root := f.Provision()
	before := fixture.Snap(t, root)
	for name, src := range map[string]node.Source{"files": {Files: []string{c1.Path, c2.Path}}, "repo": {Repo: f.Repo}} {
		rep, err := nodetest.Apply(context.Background(), root, src, node.ApplyOptions{DryRun: true}, node.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fixture.AssertUnchanged(t, root, before)
		if !rep.DryRun || !slices.Equal(sqVersions(rep.Plans), []string{"1.0.1", "1.0.2"}) {
			t.Fatalf("%s: report %+v, want a dry run planning 1.0.1 and 1.0.2", name, rep)
		}
		p1, p2 := rep.Plans[0], rep.Plans[1]
		if !slices.Equal(p1.Writes, []string{"etc/app/app.conf"}) || len(p1.Actions) != 1 || p1.Actions[0].Unit != "app.service" || p1.Actions[0].Action != manifests.ActionRestart {
			t.Errorf("%s: plan 1.0.1 = %+v, want a write of etc/app/app.conf restarting app.service", name, p1)
		}
		if !slices.Equal(p2.Deletes, []string{"etc/motd"}) || len(p2.Actions) != 0 || !slices.Equal(p2.Unclaimed, []string{"etc/motd"}) {
			t.Errorf("%s: plan 1.0.2 = %+v, want an unclaimed delete of etc/motd", name, p2)
		}
		if len(p1.Restarted) != 0 {
			t.Errorf("%s: dry run restarted %v", name, p1.Restarted)
		}
	}
	if got := sqApplied(t, root); len(got) != 0 {
		t.Fatalf("dry run applied %v", got)
	}
}

func TestSequenceVersionNotGreaterRefusedAtCreate(t *testing.T) {
	f := fixture.New(t)
	f.Create("1.0.1", f.Change("/etc/motd", "one\n"))
	index := filepath.Join(f.Repo, repo.IndexFile)
	was, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1.0.1", "1.0.0", "0.9.9", "1.0.1-rc.1"} {
		_, err := overlay.Create(context.Background(), f.Repo, f.Key, f.Change("/etc/motd", "two "+v+"\n"), overlay.CreateOptions{Version: v})
		fixture.ErrIs(t, err, manifests.ErrVersion, v, "1.0.1")
	}
	_, err = overlay.Create(context.Background(), f.Repo, f.Key, f.Change("/etc/motd", "two\n"), overlay.CreateOptions{Version: "1.1"})
	fixture.ErrIs(t, err, manifests.ErrVersion, "1.1")
	now, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if string(now) != string(was) {
		t.Error("a refused create changed the index")
	}
	ents, err := os.ReadDir(filepath.Join(f.Repo, "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("overlays/ holds %d files after refused creates, want 1", len(ents))
	}
}

func TestSequenceEmptyChangeRefused(t *testing.T) {
	f := fixture.New(t)
	_, err := overlay.Create(context.Background(), f.Repo, f.Key, f.Change("/etc/motd", "hello\n"), overlay.CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, overlay.ErrEmpty, "1.0.1", "1.0.0")
	_, err = overlay.Create(context.Background(), f.Repo, f.Key, overlay.Change{}, overlay.CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, overlay.ErrEmpty, "1.0.1")
	if _, err := os.Stat(filepath.Join(f.Repo, "overlays", "test-1.0.1.overlay.tar.zst")); err == nil {
		t.Error("an empty change wrote an overlay file")
	}
}

func TestSequenceLineMismatch(t *testing.T) {
	f := fixture.New(t)
	root := f.Provision()
	data := []byte("other line\n")
	e := manifests.Entry{Path: "etc/motd", Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(data)), SHA256: sqSHA(data)}
	m := fixture.HeadManifest(t, root, "1.0.1", []manifests.Entry{e}, nil)
	m.Line = "other"
	p := filepath.Join(t.TempDir(), "other-1.0.1.overlay.tar.zst")
	craft(t, p, m, f.Key, []member{fixture.FileMember(e, data)})
	before := fixture.Snap(t, root)
	_, err := apply(root, p)
	fixture.ErrIs(t, err, overlay.ErrSequence, "line other", "line test")
	fixture.AssertUnchanged(t, root, before)
}

// A manifest naming the node's head as its parent over a history the
// node does not have (a forged image digest, an applied overlay missing
// from the lineage) is refused before anything changes.
func TestSequenceForgedLineageRefused(t *testing.T) {
	f := fixture.New(t)
	c1 := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	c2 := f.Create("1.0.2", f.Change("/etc/app/app.conf", "port 82\n"))
	root := f.Provision()
	if _, err := apply(root, c1.Path, c2.Path); err != nil {
		t.Fatal(err)
	}
	data := []byte("forged history\n")
	e := manifests.Entry{Path: "etc/motd", Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(data)), SHA256: sqSHA(data)}
	for name, tc := range map[string]struct {
		spoil   func(m *manifests.OverlayManifest)
		mention []string
	}{
		"image digest forged": {
			func(m *manifests.OverlayManifest) { m.Lineage[0].Digest = manifests.Digest([]byte("another image")) },
			[]string{"forged or foreign", m0(t, root).Version},
		},
		"applied overlay left out": {
			func(m *manifests.OverlayManifest) { m.Lineage = []manifests.Ref{m.Lineage[0], m.Parent} },
			[]string{"lacks 1.0.1"},
		},
	} {
		m := fixture.HeadManifest(t, root, "1.0.3", []manifests.Entry{e}, nil)
		if len(m.Lineage) != 3 {
			t.Fatalf("lineage %v, want image, 1.0.1, 1.0.2", m.Lineage)
		}
		tc.spoil(m)
		p := filepath.Join(t.TempDir(), "test-1.0.3.overlay.tar.zst")
		craft(t, p, m, f.Key, []member{fixture.FileMember(e, data)})
		before := fixture.Snap(t, root)
		_, err := apply(root, p)
		t.Logf("%s: %v", name, err)
		fixture.ErrIs(t, err, overlay.ErrSequence, tc.mention...)
		fixture.AssertUnchanged(t, root, before)
	}
}

// m0 returns the node's provisioning image reference.
func m0(t *testing.T, root string) manifests.Ref {
	t.Helper()
	return sqLedger(t, root).Entries[0].Head
}

func TestSequenceImageConstraint(t *testing.T) {
	f := fixture.New(t)
	// overlay.Create refuses a constraint its own line's image does not meet.
	idx, err := os.ReadFile(filepath.Join(f.Repo, repo.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	_, err = overlay.Create(context.Background(), f.Repo, f.Key, f.Change("/etc/motd", "v2 only\n"), overlay.CreateOptions{Version: "1.0.1", RequiresImage: "^2.0.0"})
	fixture.ErrIs(t, err, overlay.ErrConstraint, "1.0.1", "^2.0.0", "1.0.0")
	if now, _ := os.ReadFile(filepath.Join(f.Repo, repo.IndexFile)); string(now) != string(idx) {
		t.Error("a refused create changed the index")
	}

	// Apply refuses an overlay (crafted past overlay.Create) whose constraint the
	// node's base image does not meet.
	root := f.Provision()
	data := []byte("v2 only\n")
	e := manifests.Entry{Path: "etc/motd", Type: manifests.TypeFile, Mode: 0o644, Size: int64(len(data)), SHA256: sqSHA(data)}
	m := fixture.HeadManifest(t, root, "1.0.1", []manifests.Entry{e}, nil)
	m.Requires.Image = "^2.0.0"
	p := filepath.Join(t.TempDir(), "test-1.0.1.overlay.tar.zst")
	craft(t, p, m, f.Key, []member{fixture.FileMember(e, data)})
	before := fixture.Snap(t, root)
	_, err = apply(root, p)
	fixture.ErrIs(t, err, overlay.ErrConstraint, "1.0.1", "^2.0.0", "1.0.0")
	fixture.AssertUnchanged(t, root, before)
}

func TestApplyLockHeldFailsFast(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "locked\n"))
	root := f.Provision()
	before := fixture.Snap(t, root)
	unlock, err := nodestate.Node{Root: root}.Lock(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, nodestate.ErrLocked, root, "pid "+strconv.Itoa(os.Getpid()))
	fixture.AssertUnchanged(t, root, before)
	_, err = nodetest.Rollback(context.Background(), root, "", node.Options{})
	fixture.ErrIs(t, err, nodestate.ErrLocked)
}

func TestApplyWaitsForLock(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "waited\n"))
	root := f.Provision()
	unlock, err := nodestate.Node{Root: root}.Lock(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(200 * time.Millisecond)
		released.Store(true)
		unlock()
	}()
	_, err = nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{LockWait: 5 * time.Second})
	<-done
	if err != nil {
		t.Fatalf("apply while the lock is released within LockWait: %v", err)
	}
	if !released.Load() {
		t.Fatal("apply ran while the lock was held")
	}
	if got := sqApplied(t, root); !slices.Equal(got, []string{"1.0.1"}) {
		t.Fatalf("applied = %v", got)
	}
}

func TestApplyConcurrentSameOverlays(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 2)
	root := f.Provision()
	var wg sync.WaitGroup
	reps := make([]*node.ApplyReport, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = nodetest.Apply(context.Background(), root, node.Source{Files: []string{cs[0].Path, cs[1].Path}}, node.ApplyOptions{}, node.Options{LockWait: time.Minute})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	fresh, skipped := 0, 0
	for _, rep := range reps {
		all, none := true, true
		for _, p := range rep.Plans {
			all = all && p.AlreadyApplied
			none = none && !p.AlreadyApplied
		}
		switch {
		case len(rep.Plans) == 2 && none:
			fresh++
		case len(rep.Plans) == 2 && all:
			skipped++
		}
	}
	if fresh != 1 || skipped != 1 {
		t.Errorf("one run should apply both and the other skip both: %+v / %+v", reps[0].Plans, reps[1].Plans)
	}
	l := sqLedger(t, root)
	for _, v := range []string{"1.0.1", "1.0.2"} {
		if n := sqCount(l, manifests.LedgerApply, v); n != 1 {
			t.Errorf("ledger has %d apply records of %s, want 1: %v", n, v, sqActions(l))
		}
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != cs[1].Manifest.TreeDigest {
		t.Errorf("tree digest %s, want %s", a.TreeDigest, cs[1].Manifest.TreeDigest)
	}
}

// sqRichChange returns a change that exercises most kinds of journal op:
// modified files, a directory replaced by a file, new nested directories,
// a deleted directory tree and a deleted symlink. (A file replaced by a
// directory is left to its own test: see TestRollbackFileReplacedByDirectory.)
func sqRichChange(f *fixture.Fixture) overlay.Change {
	f.T.Helper()
	return overlay.Change{
		Adds: []overlay.Add{
			{Dest: "/etc/app/app.conf", Src: f.HostFile("port 8080\n")},
			{Dest: "/etc/app/secret", Src: f.HostFile("new secret\n")},
			{Dest: "/etc/app/conf.d", Src: f.HostFile("conf.d is a file now\n")},
			{Dest: "/etc/new/deep/x", Src: f.HostFile("x\n")},
		},
		Deletes: []string{"/usr/share/doc", "/etc/link"},
	}
}

// A line longer than the lineage window: manifests list the nearest
// LineageWindow ancestors only, a node far behind is told it has a gap
// (not a fork), and catching up from the repository works as before.
func TestLineageWindow(t *testing.T) {
	f := fixture.New(t)
	n := manifests.LineageWindow + 6
	var last *overlay.Created
	for i := 1; i <= n; i++ {
		last = f.Create("1.0."+strconv.Itoa(i), f.Change("/etc/app/conf.d/w.conf", "w "+strconv.Itoa(i)+"\n"))
	}
	if got := len(last.Manifest.Lineage); got != manifests.LineageWindow {
		t.Fatalf("the %dth overlay lists %d ancestors, want %d", n, got, manifests.LineageWindow)
	}
	root := f.Provision()
	before := fixture.Snap(t, root)
	_, err := apply(root, last.Path)
	fixture.ErrIs(t, err, overlay.ErrSequence, "missing: the overlays after 1.0.0", "1.0."+strconv.Itoa(n-1))
	fixture.AssertUnchanged(t, root, before)
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatalf("catching up a line longer than the window: %v", err)
	}
	if a, err := nodetest.Verify(context.Background(), root, node.VerifyOptions{Repo: f.Repo, Files: true}); err != nil || !a.OK() || a.Head.Version != "1.0."+strconv.Itoa(n) {
		t.Fatalf("audit after catching up: %v %+v", err, a)
	}
}
