package overlay_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	. "github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// crEntry returns the manifest entry for path p, failing if there is none.
func crEntry(t *testing.T, m *manifests.OverlayManifest, p string) manifests.Entry {
	t.Helper()
	for _, e := range m.Entries {
		if e.Path == p {
			return e
		}
	}
	t.Fatalf("overlay %s has no entry %s: %+v", m.Version, p, m.Entries)
	return manifests.Entry{}
}

// crService returns the catalog entry of unit.
func crService(t *testing.T, cat *manifests.Catalog, unit string) manifests.Service {
	t.Helper()
	if cat == nil {
		t.Fatal("overlay carries no catalog")
	}
	for _, s := range cat.Services {
		if s.Unit == unit {
			return s
		}
	}
	t.Fatalf("catalog has no %s: %+v", unit, cat.Services)
	return manifests.Service{}
}

// crRefused checks a refused Create wrote no overlay and left the index.
func crRefused(t *testing.T, f *fixture.Fixture, indexBefore []byte) {
	t.Helper()
	now, err := os.ReadFile(filepath.Join(f.Repo, repo.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(now) != string(indexBefore) {
		t.Error("a refused create changed the index")
	}
	if ents, _ := os.ReadDir(filepath.Join(f.Repo, "overlays")); len(ents) != 0 {
		t.Errorf("a refused create left files in overlays/: %v", ents)
	}
}

func crIndex(t *testing.T, f *fixture.Fixture) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.Repo, repo.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCreateTreeIdenticalIsEmpty(t *testing.T) {
	f := fixture.New(t)
	dir := t.TempDir()
	fixture.WriteFiles(t, dir, map[string]string{
		"etc/motd":              "hello\n",
		"etc/app/app.conf":      "port 80\n",
		"etc/app/conf.d/a.conf": "a\n",
		"usr/bin/app":           "#!/bin/sh\nexec sleep infinity\n",
	})
	if err := os.Symlink("app", filepath.Join(dir, "etc/link")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc", "etc/app", "etc/app/conf.d", "usr", "usr/bin"} {
		if err := os.Chmod(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	idx := crIndex(t, f)
	_, err := Create(context.Background(), f.Repo, f.Key, Change{Tree: dir}, CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, ErrEmpty, "1.0.1", "head 1.0.0")
	crRefused(t, f, idx)

	// A mode change alone is a change, taken as it is on disk.
	if err := os.Chmod(filepath.Join(dir, "etc/motd"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := f.Create("1.0.1", Change{Tree: dir})
	if len(c.Manifest.Entries) != 1 {
		t.Fatalf("entries = %+v, want only etc/motd", c.Manifest.Entries)
	}
	if e := crEntry(t, c.Manifest, "etc/motd"); e.Mode != 0o600 {
		t.Errorf("etc/motd mode %04o, want 0600 from the tree", uint32(e.Mode))
	}
}

func TestCreateAddKeepsHeadModeAndOwner(t *testing.T) {
	testenv.RequireRoot(t)
	f := fixture.New(t)
	secret := f.HostFile("new secret\n")
	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(secret, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	tool := f.HostFile("#!/bin/sh\n")
	if err := os.Chmod(tool, 0o700); err != nil {
		t.Fatal(err)
	}
	note := f.HostFile("note\n")
	if err := os.Lchown(note, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	c := f.Create("1.0.1", Change{Adds: []Add{
		{Dest: "/etc/app/secret", Src: secret},
		{Dest: "/usr/bin/tool", Src: tool},
		{Dest: "/etc/note", Src: note},
	}})
	check := func(p string, mode manifests.Mode) {
		t.Helper()
		e := crEntry(t, c.Manifest, p)
		if e.Mode != mode || e.UID != 0 || e.GID != 0 {
			t.Errorf("%s: mode %04o owner %d:%d, want %04o root:root", p, uint32(e.Mode), e.UID, e.GID, uint32(mode))
		}
	}
	check("etc/app/secret", 0o600) // head's mode and owner, not the host file's
	check("usr/bin/tool", 0o755)   // new executable
	check("etc/note", 0o644)       // new file

	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	mode, uid, gid := fixture.Stat(t, filepath.Join(root, "etc/app/secret"))
	if mode.Perm() != 0o600 || uid != 0 || gid != 0 {
		t.Errorf("node's etc/app/secret: %v %d:%d, want 0600 root:root", mode, uid, gid)
	}
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}

func TestCreateUnitFileChangeUpdatesCatalog(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", Change{Adds: []Add{
		{Dest: "/usr/lib/systemd/system/other.service", Src: f.HostFile("[Service]\nExecStart=/usr/bin/newbin\n")},
		{Dest: "/usr/bin/newbin", Src: f.HostFile("#!/bin/sh\nexec sleep infinity\n")},
	}})
	m := c.Manifest
	if len(m.Services) != 1 {
		t.Fatalf("services = %+v, want one action for other.service", m.Services)
	}
	if s := m.Services[0]; s.Unit != "other.service" || s.Action != manifests.ActionRestart || !s.DaemonReload ||
		!slices.Contains(s.Because, "usr/lib/systemd/system/other.service") {
		t.Errorf("service action = %+v, want restart of other.service with daemon-reload", s)
	}
	other := crService(t, m.Catalog, "other.service")
	if !slices.Contains(other.Binaries, "usr/bin/newbin") || slices.Contains(other.Binaries, "usr/bin/other") {
		t.Errorf("other.service binaries = %v, want usr/bin/newbin and not usr/bin/other", other.Binaries)
	}
	app := crService(t, m.Catalog, "app.service")
	if !slices.Equal(app.Paths, []string{"etc/app/app.conf"}) || !slices.Equal(app.ReloadPaths, []string{"etc/app/conf.d"}) {
		t.Errorf("app.service lost its declared paths: %+v", app)
	}

	// The next overlay plans against the new catalog.
	c2 := f.Create("1.0.2", Change{Adds: []Add{
		{Dest: "/usr/bin/newbin", Src: f.HostFile("#!/bin/sh\nexec sleep 5\n")},
		{Dest: "/usr/bin/other", Src: f.HostFile("#!/bin/sh\nexit 0\n")},
	}})
	if s := c2.Manifest.Services; len(s) != 1 || s[0].Unit != "other.service" || s[0].DaemonReload || !slices.Equal(s[0].Because, []string{"usr/bin/newbin"}) {
		t.Errorf("1.0.2 services = %+v, want a plain restart of other.service for usr/bin/newbin", s)
	}
	if !slices.Equal(c2.Manifest.Unclaimed, []string{"usr/bin/other"}) {
		t.Errorf("1.0.2 unclaimed = %v, want usr/bin/other", c2.Manifest.Unclaimed)
	}
	if c2.Manifest.Catalog != nil {
		t.Errorf("1.0.2 changed no unit file but carries a catalog")
	}
}

func TestCreateDeclaredReloadPath(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/conf.d/b.conf", "b\n"))
	want := manifests.ServiceAction{Unit: "app.service", Action: manifests.ActionReload, Because: []string{"etc/app/conf.d/b.conf"}}
	if s := c.Manifest.Services; len(s) != 1 || s[0].Unit != want.Unit || s[0].Action != want.Action || s[0].DaemonReload || !slices.Equal(s[0].Because, want.Because) {
		t.Errorf("services = %+v, want %+v", s, want)
	}
	if len(c.Manifest.Unclaimed) != 0 || c.Manifest.Catalog != nil {
		t.Errorf("unclaimed %v catalog %v, want none", c.Manifest.Unclaimed, c.Manifest.Catalog)
	}

	// A restart path changed alongside wins over the reload.
	c2 := f.Create("1.0.2", Change{Adds: []Add{
		{Dest: "/etc/app/conf.d/b.conf", Src: f.HostFile("b2\n")},
		{Dest: "/etc/app/app.conf", Src: f.HostFile("port 82\n")},
	}})
	if s := c2.Manifest.Services; len(s) != 1 || s[0].Action != manifests.ActionRestart || len(s[0].Because) != 2 {
		t.Errorf("1.0.2 services = %+v, want one restart of app.service for both paths", s)
	}

	// A forced action on a unit the catalog lacks is refused, naming the
	// closest one it has, unless allowed; nothing is written.
	idx := crIndex(t, f)
	overlaysBefore, _ := os.ReadDir(filepath.Join(f.Repo, "overlays"))
	for _, ch := range []Change{
		{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("x\n")}}, Restart: []string{"app.servcie"}},
		{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("x\n")}}, Reload: []string{"cron.service"}},
		{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("x\n")}}, Reload: []string{"x;reboot"}},
	} {
		_, err := Create(context.Background(), f.Repo, f.Key, ch, CreateOptions{Version: "1.0.3"})
		if !errors.Is(err, node.ErrUnknownUnit) {
			t.Errorf("forced %v %v: %v, want node.ErrUnknownUnit", ch.Restart, ch.Reload, err)
		}
	}
	_, err := Create(context.Background(), f.Repo, f.Key, Change{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("x\n")}}, Restart: []string{"app.servcie"}}, CreateOptions{Version: "1.0.3"})
	fixture.ErrIs(t, err, node.ErrUnknownUnit, "--restart app.servcie", "did you mean app.service?", "--allow-unknown-unit")
	if overlaysNow, _ := os.ReadDir(filepath.Join(f.Repo, "overlays")); len(overlaysNow) != len(overlaysBefore) || string(crIndex(t, f)) != string(idx) {
		t.Error("a refused create changed the repository")
	}

	// Forced actions join the plan.
	c3 := f.Create("1.0.3", Change{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("x\n")}}, Reload: []string{"cron.service"}, AllowUnknownUnits: true})
	if s := c3.Manifest.Services; len(s) != 1 || s[0].Unit != "cron.service" || s[0].Action != manifests.ActionReload {
		t.Errorf("1.0.3 services = %+v, want a forced reload of cron.service", s)
	}
	c4 := f.Create("1.0.4", Change{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("y\n")}}, Restart: []string{"app.service"}})
	if s := c4.Manifest.Services; len(s) != 1 || s[0].Unit != "app.service" || s[0].Because[0] != "--restart" {
		t.Errorf("1.0.4 services = %+v, want a forced restart of app.service", s)
	}
}

func TestCreateDeleteMissingPath(t *testing.T) {
	f := fixture.New(t)
	idx := crIndex(t, f)
	_, err := Create(context.Background(), f.Repo, f.Key, Change{Deletes: []string{"/etc/nope"}}, CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, tree.ErrNotExist, "/etc/nope")
	_, err = Create(context.Background(), f.Repo, f.Key, Change{Deletes: []string{"etc/motd"}}, CreateOptions{Version: "1.0.1"})
	fixture.ErrIs(t, err, manifests.ErrUnsafePath, "etc/motd")
	crRefused(t, f, idx)

	// A present path deletes with everything below it.
	c := f.Create("1.0.1", Change{Deletes: []string{"/usr/share/doc"}})
	if !slices.Equal(c.Manifest.Deletes, []string{"usr/share/doc"}) || len(c.Manifest.Entries) != 0 {
		t.Errorf("manifest deletes %v entries %v", c.Manifest.Deletes, c.Manifest.Entries)
	}
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	if _, err := os.Lstat(filepath.Join(root, "usr/share/doc")); err == nil {
		t.Error("usr/share/doc survived the delete")
	}
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}

// A change outside the line's managed hierarchies (/etc, /usr, /opt by
// default), or deleting a hierarchy itself, is refused before anything is
// signed or written to the repository.
func TestCreateOutsideHierarchiesRefused(t *testing.T) {
	f := fixture.New(t)
	index, err := os.ReadFile(filepath.Join(f.Repo, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]Change{
		"write /srv":   {Adds: []Add{{Dest: "/srv/x", Src: f.HostFile("x\n")}}},
		"write /var":   {Adds: []Add{{Dest: "/var/cache/x", Src: f.HostFile("x\n")}}},
		"delete /etc":  {Deletes: []string{"/etc"}},
		"write a root": {Adds: []Add{{Dest: "/x", Src: f.HostFile("x\n")}}},
	} {
		_, err := Create(context.Background(), f.Repo, f.Key, ch, CreateOptions{Version: "1.0.1"})
		if !errors.Is(err, ErrOutsideHierarchies) || !errors.Is(err, manifests.ErrRejected) {
			t.Errorf("%s: %v, want ErrOutsideHierarchies", name, err)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(f.Repo, "index.json")); string(after) != string(index) {
		t.Error("a refused change altered the repository index")
	}
	f.Create("1.0.1", f.Change("/opt/tool/conf", "ok\n"))
}

// The head state a publisher reads instead of the chain is what the
// chain folds to; a tampered one is refused, and the audit compares them.
func TestHeadState(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	f.Create("1.0.2", f.Change("/usr/lib/systemd/system/other.service", "[Service]\nExecStart=/usr/bin/other --x\n"))
	r, err := repo.Open(context.Background(), f.Repo, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := &r.Index.Lines[0]
	if l.State == nil || l.State.Version != "1.0.2" {
		t.Fatalf("index state %+v, want one for 1.0.2", l.State)
	}
	if n, _ := filepath.Glob(filepath.Join(f.Repo, "states", "*")); len(n) != 1 {
		t.Errorf("state files %v, want only the head's", n)
	}
	hs, err := repo.LoadHead(ctx, r, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadChain(ctx, r, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if hs.State.Digest() != c.State.Digest() || hs.Head() != c.Head() || len(hs.Lineage()) != len(c.Lineage()) || len(hs.Catalog.Services) != len(c.Catalog.Services) {
		t.Fatalf("head state and chain differ")
	}
	if a, err := VerifyRepo(ctx, f.Repo, nil); err != nil || !a.OK() {
		t.Fatalf("audit: %v %+v", err, a)
	}
	// A state file changed behind the index's back is refused.
	p := filepath.Join(f.Repo, filepath.FromSlash(l.State.File))
	raw, _ := os.ReadFile(p)
	i := strings.Index(string(raw), `"tree_digest"`) + len(`"tree_digest": "sha256:`)
	raw[i] ^= 1 // the same size, another digest
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Create(ctx, f.Repo, f.Key, f.Change("/etc/motd", "x\n"), CreateOptions{Version: "1.0.3"})
	fixture.ErrIs(t, err, repo.ErrTampered, "head state")
	if a, err := VerifyRepo(ctx, f.Repo, nil); err != nil || a.OK() || !fixture.HasFinding(a, "state", "head state") {
		t.Errorf("audit of a tampered state: %v %+v", err, a)
	}
}

// Create publishes through the repository's store: it writes over
// nothing the index does not name, and takes its archive back when the
// index cannot be saved.
func TestCreatePublishesThroughTheStore(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", Change{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("one\n")}}})
	next := filepath.Join(filepath.Dir(c.Path), strings.Replace(filepath.Base(c.Path), "1.0.1", "1.0.2", 1))
	add := Change{Adds: []Add{{Dest: "/etc/motd", Src: f.HostFile("two\n")}}}

	// Something in the way, by hand or a link: refused, left as it was.
	idx := crIndex(t, f)
	if err := os.WriteFile(next, []byte("by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Create(context.Background(), f.Repo, f.Key, add, CreateOptions{Version: "1.0.2"})
	fixture.ErrIs(t, err, repo.ErrExists, filepath.Base(next), "the index does not name it")
	if b, _ := os.ReadFile(next); string(b) != "by hand" || string(crIndex(t, f)) != string(idx) {
		t.Error("a refused create changed the file in the way or the index")
	}
	if err := os.Remove(next); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(c.Path, next); err != nil {
		t.Fatal(err)
	}
	_, err = Create(context.Background(), f.Repo, f.Key, add, CreateOptions{Version: "1.0.2"})
	fixture.ErrIs(t, err, repo.ErrExists, filepath.Base(next))
	if err := os.Remove(next); err != nil {
		t.Fatal(err)
	}

	// The index cannot be written (a directory holding a file where its
	// signature goes): the archive already put is removed again.
	block := filepath.Join(f.Repo, repo.SigPath(repo.IndexFile))
	sig, err := os.ReadFile(block)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(block, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(context.Background(), f.Repo, f.Key, add, CreateOptions{Version: "1.0.2"}); err == nil {
		t.Fatal("create with an unwritable index succeeded")
	}
	if _, err := os.Lstat(next); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the archive of a create whose index failed is still there: %v", err)
	}
	if string(crIndex(t, f)) != string(idx) {
		t.Error("the failed create changed the index")
	}
	if err := os.RemoveAll(block); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(block, sig, 0o644); err != nil {
		t.Fatal(err)
	}

	// Published, hashed as written: the index's size and SHA-256 are the
	// file's.
	c2 := f.Create("1.0.2", add)
	sum, size, err := tree.HashFile(c2.Path)
	if err != nil {
		t.Fatal(err)
	}
	x, err := repo.Open(context.Background(), f.Repo, nil)
	if err != nil {
		t.Fatal(err)
	}
	ovs := x.Index.Lines[0].Overlays
	if last := ovs[len(ovs)-1]; last.Version != "1.0.2" || last.SHA256 != sum || last.Size != size {
		t.Errorf("index records %+v, the file is %s, %d bytes", last, sum, size)
	}
}
