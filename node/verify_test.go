package node_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/fixture"
)

// vfRequireFinding fails unless a finding of kind and severity exists
// whose message contains every part; it returns the first such finding.
func vfRequireFinding(t *testing.T, a *schema.Audit, severity, kind string, parts ...string) schema.Finding {
	t.Helper()
next:
	for _, f := range a.Findings {
		if f.Kind != kind || f.Severity != severity {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(f.Message, p) {
				continue next
			}
		}
		return f
	}
	t.Fatalf("no %s %q finding naming %q in %+v", severity, kind, parts, a.Findings)
	return schema.Finding{}
}

func TestVerifyNodeClean(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "v1\n"))
	root := f.Provision()
	a := fixture.Audit(t, root, f.Repo, true)
	if !a.OK() || !a.FilesChecked || a.Head == nil || a.Head.Version != "1.0.0" || a.Behind != 1 {
		t.Fatalf("fresh node audit = %+v", a)
	}
	fixture.MustApply(t, root, c.Path)
	before := fixture.Snap(t, root)
	a = fixture.Audit(t, root, f.Repo, true)
	fixture.AssertUnchanged(t, root, before)
	if !a.OK() || len(a.Findings) != 0 {
		t.Fatalf("clean node audit findings = %+v", a.Findings)
	}
	if a.Head.Version != "1.0.1" || a.Behind != 0 || !slices.Equal(a.Applied, []string{"1.0.1"}) || a.TreeDigest != c.Manifest.TreeDigest {
		t.Errorf("audit = %+v", a)
	}
}

func TestVerifyNodeFilesDrift(t *testing.T) {
	testenv.RequireRoot(t)
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "v1\n"))
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(os.WriteFile(filepath.Join(root, "etc/motd"), []byte("v2\n"), 0o644))     // edited, same size
	mustDo(os.Chmod(filepath.Join(root, "etc/app/app.conf"), 0o666))                 // chmod
	mustDo(os.Lchown(filepath.Join(root, "etc/app/secret"), 1000, 1000))             // chown
	mustDo(os.Remove(filepath.Join(root, "usr/share/doc/readme")))                   // deleted
	mustDo(os.WriteFile(filepath.Join(root, "etc/extra"), []byte("extra\n"), 0o644)) // added

	// Without files the drift is invisible.
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, false))

	a := fixture.Audit(t, root, f.Repo, true)
	if a.OK() {
		t.Fatal("audit with files is OK on a drifted node")
	}
	want := map[string]string{
		"etc/motd":             "content changed",
		"etc/app/app.conf":     "mode 0666, expected 0644",
		"etc/app/secret":       "owner 1000:1000, expected 0:0",
		"usr/share/doc/readme": "missing",
		"etc/extra":            "not part of the expected tree",
	}
	var got []string
	for _, fd := range sqFindings(a, "drift") {
		got = append(got, fd.Path)
		if fd.Severity != "problem" {
			t.Errorf("drift of %s has severity %s", fd.Path, fd.Severity)
		}
		w, ok := want[fd.Path]
		if !ok {
			t.Errorf("unexpected drift finding %+v", fd)
			continue
		}
		if !strings.Contains(fd.Message, w) || !strings.Contains(fd.Message, "/"+fd.Path) {
			t.Errorf("drift of %s says %q, want it to name %q", fd.Path, fd.Message, w)
		}
	}
	sort.Strings(got)
	var wantPaths []string
	for p := range want {
		wantPaths = append(wantPaths, p)
	}
	sort.Strings(wantPaths)
	if !slices.Equal(got, wantPaths) {
		t.Errorf("drifted paths = %v, want %v", got, wantPaths)
	}
}

func TestVerifyNodeLedgerTampered(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "v1\n"))
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	lp := filepath.Join(root, manifests.LedgerPath)
	raw, err := os.ReadFile(lp)
	if err != nil {
		t.Fatal(err)
	}
	var l manifests.Ledger
	if err := manifests.Decode(raw, &l); err != nil {
		t.Fatal(err)
	}
	l.Entries[1].TreeDigest = l.Entries[0].TreeDigest // claim the apply changed nothing
	b, err := manifests.Encode(&l)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	a := fixture.Audit(t, root, f.Repo, false)
	if a.OK() {
		t.Fatal("audit is OK with a tampered ledger")
	}
	vfRequireFinding(t, a, "problem", "chain", "record 1", "altered")

	// Apply and Rollback refuse the node too.
	before := fixture.Snap(t, root)
	_, err = apply(root, c.Path)
	fixture.ErrIs(t, err, manifests.ErrInvalid, "record 1")
	_, err = nodetest.Rollback(t.Context(), root, "", node.Options{})
	fixture.ErrIs(t, err, manifests.ErrInvalid, "record 1")
	fixture.AssertUnchanged(t, root, before)
}

func TestVerifyNodeStoredManifestTampered(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "v1\n"))
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	p := filepath.Join(root, manifests.StateDir, "overlays", "1.0.1.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(raw, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	a := fixture.Audit(t, root, f.Repo, false)
	vfRequireFinding(t, a, "problem", "chain", "1.0.1", c.Digest)
}

func TestVerifyNodeBehind(t *testing.T) {
	f := fixture.New(t)
	cs := sqChain(f, 3)
	root := f.Provision()
	fixture.MustApply(t, root, cs[0].Path)
	a := fixture.Audit(t, root, f.Repo, false)
	fixture.RequireOK(t, a)
	if a.Behind != 2 || a.RepoHead == nil || a.RepoHead.Version != "1.0.3" {
		t.Errorf("audit behind %d, repo head %v; want 2 and 1.0.3", a.Behind, a.RepoHead)
	}
	vfRequireFinding(t, a, "warning", "behind", "2 overlay", "1.0.2, 1.0.3")
}

func TestVerifyNodeUnknownOverlay(t *testing.T) {
	t.Run("repo has no overlays", func(t *testing.T) {
		f := fixture.New(t)
		repo2 := sqSecondRepo(f)
		c := sqCreateIn(f, repo2, "1.0.1", f.Change("/etc/motd", "theirs\n"))
		root := f.Provision()
		fixture.MustApply(t, root, c.Path)
		fixture.RequireOK(t, fixture.Audit(t, root, repo2, true))
		a := fixture.Audit(t, root, f.Repo, false)
		vfRequireFinding(t, a, "problem", "unknown", "1.0.1", c.Digest)
	})
	t.Run("repo has another version there", func(t *testing.T) {
		f := fixture.New(t)
		f.Create("1.0.1", f.Change("/etc/motd", "ours\n"))
		repo2 := sqSecondRepo(f)
		c := sqCreateIn(f, repo2, "1.0.5", f.Change("/etc/motd", "theirs\n"))
		root := f.Provision()
		fixture.MustApply(t, root, c.Path)
		a := fixture.Audit(t, root, f.Repo, false)
		vfRequireFinding(t, a, "problem", "unknown", "1.0.5", c.Digest)
	})
	t.Run("repo has the same version with another digest", func(t *testing.T) {
		f := fixture.New(t)
		ours := f.Create("1.0.1", f.Change("/etc/motd", "ours\n"))
		repo2 := sqSecondRepo(f)
		c := sqCreateIn(f, repo2, "1.0.1", f.Change("/etc/motd", "theirs\n"))
		root := f.Provision()
		fixture.MustApply(t, root, c.Path)
		a := fixture.Audit(t, root, f.Repo, false)
		vfRequireFinding(t, a, "problem", "tampered", "1.0.1", c.Digest, ours.Digest)
	})
}

func TestVerifyRepo(t *testing.T) {
	setup := func(t *testing.T) (*fixture.Fixture, []*overlay.Created) {
		f := fixture.New(t)
		return f, sqChain(f, 2)
	}
	t.Run("good", func(t *testing.T) {
		f, _ := setup(t)
		a, err := overlay.VerifyRepo(context.Background(), f.Repo, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !a.OK() || len(a.Findings) != 0 {
			t.Fatalf("findings = %+v", a.Findings)
		}
		if a.RepoHead == nil || a.RepoHead.Version != "1.0.2" || a.Line != "test" {
			t.Errorf("audit = %+v", a)
		}
	})
	t.Run("overlay bytes replaced", func(t *testing.T) {
		f, cs := setup(t)
		if err := os.WriteFile(cs[0].Path, []byte("not an overlay"), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := overlay.VerifyRepo(context.Background(), f.Repo, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.OK() {
			t.Fatal("repository with a replaced overlay verifies")
		}
		vfRequireFinding(t, a, "problem", "chain", filepath.Base(cs[0].Path))
	})
	t.Run("overlay swapped for another signed overlay", func(t *testing.T) {
		f, cs := setup(t)
		b, err := os.ReadFile(cs[1].Path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cs[0].Path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := overlay.VerifyRepo(context.Background(), f.Repo, nil)
		if err != nil {
			t.Fatal(err)
		}
		vfRequireFinding(t, a, "problem", "chain", filepath.Base(cs[0].Path))
	})
	t.Run("index signature deleted", func(t *testing.T) {
		f, _ := setup(t)
		if err := os.Remove(repo.SigPath(filepath.Join(f.Repo, repo.IndexFile))); err != nil {
			t.Fatal(err)
		}
		a, err := overlay.VerifyRepo(context.Background(), f.Repo, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.OK() {
			t.Fatal("repository without an index signature verifies")
		}
		vfRequireFinding(t, a, "problem", "signature", "index signature")
	})
	t.Run("stray overlay file", func(t *testing.T) {
		f, _ := setup(t)
		if err := os.WriteFile(filepath.Join(f.Repo, "overlays", "stray.overlay.tar.zst"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := overlay.VerifyRepo(context.Background(), f.Repo, nil)
		if err != nil {
			t.Fatal(err)
		}
		fixture.RequireOK(t, a)
		vfRequireFinding(t, a, "warning", "unknown", "stray.overlay.tar.zst")
	})
}

// Application data is not drift (issue 22): what services write under
// /var on a directory node (a new database, a log, a file the image
// shipped there changed, one removed) is the node's own, as it is on an
// overlayfs node. The file audit and its tree digest (what the agent's
// tree metric compares) leave it alone; a file the head lacks outside
// /var is still drift.
func TestVerifyNodeFilesIgnoresVar(t *testing.T) {
	files := maps.Clone(fixture.Files)
	files["var/lib/app/state"] = "0\n"
	files["var/lib/app/seed"] = "seed\n"
	f := fixture.New(t, fixture.WithRecipe(fixture.Recipe, files))
	root := f.Provision()
	for p, content := range map[string]string{
		"var/lib/app/db":      "rows\n",
		"var/lib/app/state":   "41\n",
		"var/log/app/app.log": "started\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, "var/lib/app/seed")); err != nil {
		t.Fatal(err)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	h, err := node.Open(root, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, want, err := h.Expected()
	if err != nil {
		t.Fatal(err)
	}
	if a.TreeDigest != want.Digest() {
		t.Errorf("tree digest %s with application data, the expected tree's is %s", a.TreeDigest, want.Digest())
	}

	if err := os.WriteFile(filepath.Join(root, "srv"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a = fixture.Audit(t, root, f.Repo, true)
	if a.OK() || !fixture.HasFinding(a, "drift", "/srv is not part of the expected tree") {
		t.Fatalf("a file outside /var the head lacks: %+v, want drift", a.Findings)
	}
}

// A recipe's declared data directories (data: in the recipe, signed into
// the image manifest) are the node's own as /var is: what services write
// there is not drift, and the tree digest is the expected one; a
// directory beside them is still judged.
func TestVerifyNodeFilesIgnoresDeclaredData(t *testing.T) {
	files := maps.Clone(fixture.Files)
	files["srv/app/db/seed"] = "seed\n"
	f := fixture.New(t, fixture.WithRecipe(fixture.Recipe+"data: [/srv/app/db]\n", files))
	root := f.Provision()
	for p, content := range map[string]string{"srv/app/db/rows": "rows\n", "srv/app/db/seed": "changed\n"} {
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if err := os.WriteFile(filepath.Join(root, "srv/app/other"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a = fixture.Audit(t, root, f.Repo, true)
	if a.OK() || !fixture.HasFinding(a, "drift", "/srv/app/other is not part of the expected tree") {
		t.Fatalf("a file beside the data directory: %+v, want drift", a.Findings)
	}
}
