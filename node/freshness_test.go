package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// indexFiles returns the repository's index and its signature.
func indexFiles(t *testing.T, dir string) (raw, sig []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, repo.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	sig, err = os.ReadFile(filepath.Join(dir, repo.SigPath(repo.IndexFile)))
	if err != nil {
		t.Fatal(err)
	}
	return raw, sig
}

func putIndex(t *testing.T, dir string, raw, sig []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, repo.IndexFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, repo.SigPath(repo.IndexFile)), sig, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A validly signed but old index (replayed by a mirror or an attacker) is
// refused by a node that accepted a newer one (rollback), and an expired
// one by every node (freeze); each refusal says which and changes
// nothing, and the audits report it. A refresh makes the index current.
func TestIndexFreshness(t *testing.T) {
	f := fixture.New(t)
	f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	oldRaw, oldSig := indexFiles(t, f.Repo) // serial 2: init, then 1.0.1
	f.Create("1.0.2", f.Change("/etc/app/app.conf", "port 82\n"))
	root := f.Provision()
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo, Through: "1.0.1"}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		b, _ := os.ReadFile(filepath.Join(root, manifests.StateDir, "index-serial"))
		return strings.TrimSpace(string(b))
	}
	if got := serial(); got != "3" {
		t.Fatalf("the node recorded index serial %q, want 3", got)
	}

	// Rollback: the index of serial 2, replayed. It lists 1.0.1 only, so
	// the node would look current.
	newRaw, newSig := indexFiles(t, f.Repo)
	putIndex(t, f.Repo, oldRaw, oldSig)
	before := fixture.Snap(t, root)
	_, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, manifests.ErrIndexRollback, "serial 2", "serial 3")
	fixture.AssertUnchanged(t, root, before)
	a, err := nodetest.Verify(context.Background(), root, node.VerifyOptions{Repo: f.Repo})
	if err != nil {
		t.Fatal(err)
	}
	if a.OK() || !fixture.HasFinding(a, "freshness", "rollback") {
		t.Errorf("audit against the replayed index: %+v, want a freshness problem", a.Findings)
	}
	putIndex(t, f.Repo, newRaw, newSig)

	// Freeze: an authentic index, newer, but past its expiry.
	var x manifests.Index
	if err := manifests.Decode(newRaw, &x); err != nil {
		t.Fatal(err)
	}
	x.Serial++
	x.Expires = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	expired, err := manifests.Encode(&x)
	if err != nil {
		t.Fatal(err)
	}
	putIndex(t, f.Repo, expired, f.Key.Sign(expired, sign.IndexComment))
	before = fixture.Snap(t, root)
	_, err = nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{})
	fixture.ErrIs(t, err, manifests.ErrIndexExpired, "expired at", "serial "+strconv.FormatUint(x.Serial, 10))
	fixture.AssertUnchanged(t, root, before)
	if ra, err := overlay.VerifyRepo(context.Background(), f.Repo, nil); err != nil || ra.OK() || !fixture.HasFinding(ra, "freshness", "expired") {
		t.Errorf("repository audit of an expired index: %+v, %v", ra, err)
	}

	// A refresh publishes it again, current; the node catches up.
	if _, err := repo.Refresh(context.Background(), f.Repo, f.Key, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatalf("apply after the refresh: %v", err)
	}
	if got, want := serial(), strconv.FormatUint(x.Serial+1, 10); got != want {
		t.Errorf("the node recorded serial %s, want %s", got, want)
	}
	// A dry run records nothing.
	if _, err := repo.Refresh(context.Background(), f.Repo, f.Key, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Apply(context.Background(), root, node.Source{Repo: f.Repo}, node.ApplyOptions{DryRun: true}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	if got, want := serial(), strconv.FormatUint(x.Serial+1, 10); got != want {
		t.Errorf("a dry run recorded serial %s, want %s kept", got, want)
	}
}
