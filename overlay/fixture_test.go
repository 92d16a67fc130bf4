package overlay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/archive/archivetest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/overlay/overlaytest"
)

// Shared test fixture: a small signed image with two services, a
// repository at it, and helpers to provision nodes and snapshot them.

const fixtureRecipe = `line: test
version: 1.0.0
epoch: 1700000000
base:
  dir: rootfs
files:
  - path: /etc/app/secret
    content: "s3cret\n"
    mode: "0600"
  - path: /etc/link
    symlink: app
services:
  - unit: app.service
    paths: [/etc/app/app.conf]
    reload: [/etc/app/conf.d]
`

type fixture struct {
	t       testing.TB
	dir     string
	key     *sign.Key
	keyPath string
	repo    string
	image   string
}

func requireTools(t testing.TB) {
	t.Helper()
	testenv.RequireTools(t, testenv.Squashfs)
}

func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if filepath.Dir(p) == "usr/bin" {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	requireTools(t)
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, keyPath: filepath.Join(dir, "k.key"), repo: filepath.Join(dir, "repo")}
	if err := sign.Generate(filepath.Join(dir, "k")); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.key, err = sign.LoadKey(f.keyPath); err != nil {
		t.Fatal(err)
	}
	rdir := filepath.Join(dir, "recipe")
	writeFiles(t, filepath.Join(rdir, "rootfs"), map[string]string{
		"etc/app/app.conf":                     "port 80\n",
		"etc/app/conf.d/a.conf":                "a\n",
		"etc/motd":                             "hello\n",
		"usr/bin/app":                          "#!/bin/sh\nexec sleep infinity\n",
		"usr/lib/systemd/system/app.service":   "[Service]\nExecStart=/usr/bin/app\n",
		"usr/lib/systemd/system/other.service": "[Service]\nExecStart=/usr/bin/other\n",
		"usr/bin/other":                        "#!/bin/sh\nexec sleep infinity\n",
		"usr/share/doc/readme":                 "docs\n",
	})
	if err := os.WriteFile(filepath.Join(rdir, "recipe.yaml"), []byte(fixtureRecipe), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := builder.Build(context.Background(), filepath.Join(rdir, "recipe.yaml"), filepath.Join(dir, "images"), builder.WithKey(f.key))
	if err != nil {
		t.Fatal(err)
	}
	f.image = res.Image
	if _, err := repo.Init(context.Background(), f.repo, f.image, f.key); err != nil {
		t.Fatal(err)
	}
	return f
}

// hostFile writes content to a fresh host file and returns its path.
func (f *fixture) hostFile(content string) string {
	f.t.Helper()
	fd, err := os.CreateTemp(f.dir, "src-")
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := fd.WriteString(content); err != nil {
		f.t.Fatal(err)
	}
	fd.Close()
	return fd.Name()
}

// create makes an overlay in the fixture's repository.
func (f *fixture) create(version string, ch Change) *Created {
	f.t.Helper()
	c, err := Create(context.Background(), f.repo, f.key, ch, CreateOptions{Version: version})
	if err != nil {
		f.t.Fatalf("creating %s: %v", version, err)
	}
	return c
}

// change returns a Change writing content to image path dest.
func (f *fixture) change(dest, content string) Change {
	return Change{Adds: []Add{{Dest: dest, Src: f.hostFile(content)}}}
}

// provision makes a fresh directory node from the fixture's image.
func (f *fixture) provision() string {
	f.t.Helper()
	root := filepath.Join(f.t.TempDir(), "node")
	if _, err := builder.Provision(context.Background(), f.image, root, nil); err != nil {
		f.t.Fatal(err)
	}
	return root
}

// snapshot is a node's observable state: its tree digest (state excluded)
// and its ledger bytes.
type snapshot struct {
	digest string
	ledger string
}

func snap(t *testing.T, root string) snapshot {
	t.Helper()
	entries, err := tree.Scan(root, manifests.IsNodeState)
	if err != nil {
		t.Fatal(err)
	}
	l, err := os.ReadFile(filepath.Join(root, manifests.LedgerPath))
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{digest: manifests.TreeDigest(entries), ledger: string(l)}
}

// assertUnchanged fails the test if the node changed since before.
func assertUnchanged(t *testing.T, root string, before snapshot) {
	t.Helper()
	after := snap(t, root)
	if after.digest != before.digest {
		t.Errorf("node tree changed: %s -> %s", before.digest, after.digest)
	}
	if after.ledger != before.ledger {
		t.Errorf("node ledger changed")
	}
	if _, err := os.Stat(filepath.Join(root, manifests.StateDir, "txn")); err == nil {
		t.Errorf("transaction directory left behind")
	}
}

// apply applies files to root with no restarter.
func apply(root string, files ...string) (*node.ApplyReport, error) {
	return overlaytest.Apply(context.Background(), root, node.Source{Files: files}, node.ApplyOptions{}, node.Options{})
}

// member is one tar member of an overlay archive.
type member = archivetest.Member

// fileMember returns a regular-file member for e with data.
func fileMember(e manifests.Entry, data []byte) member {
	h := tree.Header(e, 1700000000)
	h.Size = int64(len(data))
	return member{Hdr: h, Data: data}
}

// headManifest returns a valid manifest continuing the node at root, for
// crafting: entries and deletes are the caller's.
func headManifest(t *testing.T, root, version string, entries []manifests.Entry, deletes []string) *manifests.OverlayManifest {
	t.Helper()
	line, head, lineage, state, err := nodeExpected(root)
	if err != nil {
		t.Fatal(err)
	}
	next, err := state.Apply(entries, deletes)
	if err != nil {
		next = state // crafted bad input may not fold; digest is then moot
	}
	if deletes == nil {
		deletes = []string{}
	}
	return &manifests.OverlayManifest{
		Schema: manifests.Schema, Kind: manifests.KindOverlay, Line: line, Version: version,
		Parent: head, Lineage: lineage, Requires: manifests.Requires{Image: "^1.0.0"},
		Entries: entries, Deletes: deletes, Services: []manifests.ServiceAction{}, Unclaimed: []string{},
		TreeDigest: next.Digest(), Created: "2026-01-01T00:00:00Z",
	}
}

func TestFixtureRoundTrip(t *testing.T) {
	f := newFixture(t)
	c := f.create("1.0.1", f.change("/etc/app/app.conf", "port 81\n"))
	root := f.provision()
	rep, err := apply(root, c.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Plans) != 1 || len(rep.Plans[0].Actions) != 1 || rep.Plans[0].Actions[0].Unit != "app.service" {
		t.Fatalf("plan = %+v, want a restart of app.service", rep.Plans)
	}
	a, err := overlaytest.Verify(context.Background(), root, node.VerifyOptions{Repo: f.repo, Files: true})
	if err != nil || !a.OK() {
		t.Fatalf("verify: %v %+v", err, a)
	}
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Fatalf("node digest differs from the manifest's tree_digest")
	}
}

// nodeExpected is what the state of the node at root says its tree
// should be (node.Node.Expected).
func nodeExpected(root string) (string, manifests.Ref, []manifests.Ref, tree.State, error) {
	n, err := node.Open(root, node.Options{})
	if err != nil {
		return "", manifests.Ref{}, nil, nil, err
	}
	return n.Expected()
}

// craft writes an overlay archive at path (see archivetest.Craft).
func craft(t *testing.T, path string, m *manifests.OverlayManifest, key *sign.Key, members []member) []byte {
	t.Helper()
	return archivetest.Craft(t, path, m, key, members)
}
