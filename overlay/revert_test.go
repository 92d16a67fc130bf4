package overlay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// An overlay that replaced a file with a directory is reverted to the
// file: the directory's contents go with it, without a delete that
// would fail once the file is back.
func TestRevertDirectoryOverFile(t *testing.T) {
	f := fixture.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.conf"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.Create("1.0.1", Change{Adds: []Add{{Dest: "/etc/motd", Src: dir}}})
	rev, err := Revert(context.Background(), f.Repo, "1.0.1", f.Key, RevertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := rev.Created.Manifest
	if len(m.Entries) != 1 || m.Entries[0].Path != "etc/motd" || m.Entries[0].Type != manifests.TypeFile || len(m.Deletes) != 0 {
		t.Fatalf("revert of a directory over a file: entries %+v deletes %v", m.Entries, m.Deletes)
	}
}

// A revert says what it undoes: its signed manifest names the overlay,
// the repository's log labels it "reverts V", and so does the history of
// a node that applied it.
func TestRevertIsLabelled(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	rev, err := Revert(ctx, f.Repo, "1.0.1", f.Key, RevertOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := rev.Created.Manifest.Reverts; r == nil || r.Version != "1.0.1" || r.Digest != c.Digest {
		t.Fatalf("the revert's manifest: reverts %+v, want 1.0.1 %s", r, c.Digest)
	}
	log, err := Log(ctx, f.Repo, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	es := log.Lines[0].Entries
	if last := es[len(es)-1]; last.Version != "1.0.2" || last.Reverts != "1.0.1" || es[len(es)-2].Reverts != "" {
		t.Fatalf("repo log: %+v", es)
	}
	root := f.Provision()
	if _, err := nodetest.Apply(ctx, root, node.Source{Repo: f.Repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	h, err := nodetest.History(root)
	if err != nil {
		t.Fatal(err)
	}
	last := h.Entries[len(h.Entries)-1]
	if last.Version != "1.0.2" || last.Reverts != "1.0.1" || h.Entries[len(h.Entries)-2].Reverts != "" {
		t.Fatalf("node history: %+v", h.Entries)
	}
}
