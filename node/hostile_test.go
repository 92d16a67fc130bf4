package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
	"golang.org/x/sys/unix"
)

// Hostile nodes: whoever can write inside a node root (a container
// tenant, say) must not be able to make strata touch anything outside it.

// outside makes a host directory with one file and returns both paths.
func outside(t *testing.T) (dir, victim string) {
	t.Helper()
	dir = t.TempDir()
	victim = filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("host data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, victim
}

func assertHostIntact(t *testing.T, dir, victim string) {
	t.Helper()
	b, err := os.ReadFile(victim)
	if err != nil || string(b) != "host data\n" {
		t.Fatalf("host file %s changed: %q, %v", victim, b, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("host directory %s now has %d entries (%v)", dir, len(ents), err)
	}
}

func TestForgedJournalCannotReachOutsideTheRoot(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	dir, victim := outside(t)
	rel, err := filepath.Rel(root, victim)
	if err != nil {
		t.Fatal(err)
	}
	txn := filepath.Join(root, manifests.StateDir, "txn")
	for _, d := range []string{"new", "old"} {
		if err := os.MkdirAll(filepath.Join(txn, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	forged := `{"record": {"seq": 1, "action": "apply", "line": "test", "version": "9.9.9", "digest": "x", "image": "1.0.0",
	  "head": {"version": "9.9.9", "digest": "x"}, "tree_digest": "x", "time": "t", "prev": "", "hash": ""},
	  "ops": [{"kind": "delete", "path": "` + rel + `", "existed": false, "entry": {"path": "", "type": "", "mode": "0000", "uid": 0, "gid": 0}, "old": {"path": "", "type": "", "mode": "0000", "uid": 0, "gid": 0}}]}`
	if err := os.WriteFile(filepath.Join(txn, "journal.json"), []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = apply(root, c.Path)
	if !errors.Is(err, manifests.ErrUnsafePath) {
		t.Fatalf("apply over a forged journal: %v, want ErrUnsafePath", err)
	}
	assertHostIntact(t, dir, victim)
	a, err := nodetest.Verify(context.Background(), root, node.VerifyOptions{})
	if err != nil || a.OK() {
		t.Fatalf("audit of a node with a forged journal: %v, OK=%v; want a problem", err, a != nil && a.OK())
	}
}

func TestRollbackRefusesSymlinkPlantedAfterApply(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	if _, err := apply(root, c.Path); err != nil {
		t.Fatal(err)
	}
	dir, victim := outside(t)
	app := filepath.Join(root, "etc/app")
	if err := os.Rename(app, filepath.Join(root, "etc/app.moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, app); err != nil {
		t.Fatal(err)
	}
	before := fixture.Snap(t, root)
	_, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	if !errors.Is(err, overlay.ErrSymlinkPath) || !strings.Contains(err.Error(), "etc/app") {
		t.Fatalf("rollback through a planted symlink: %v, want overlay.ErrSymlinkPath naming etc/app", err)
	}
	assertHostIntact(t, dir, victim)
	fixture.AssertUnchanged(t, root, before)
}

func TestStateDirectoryThroughSymlinkIsRefused(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	dir, victim := outside(t)
	// Move the state away and point /var/lib at the host.
	lib := filepath.Join(root, "var/lib")
	if err := os.Rename(lib, filepath.Join(root, "var/lib.real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, lib); err != nil {
		t.Fatal(err)
	}
	// Tampered state is rejected (exit 3), not "not a node".
	_, err := apply(root, c.Path)
	if !errors.Is(err, nodestate.ErrBadState) || !errors.Is(err, manifests.ErrRejected) {
		t.Fatalf("apply with /var/lib a symlink: %v, want ErrBadState", err)
	}
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); !errors.Is(err, nodestate.ErrBadState) {
		t.Fatalf("rollback with /var/lib a symlink: %v, want ErrBadState", err)
	}
	assertHostIntact(t, dir, victim)
}

func TestStrataDirectoriesStayDirectories(t *testing.T) {
	f := fixture.New(t)
	// An overlay may not delete what holds strata's own files.
	for _, p := range []string{"/usr", "/usr/lib", "/usr/lib/strata", "/usr/lib/strata/keys", "/usr/lib/strata/image.json"} {
		_, err := overlay.Create(context.Background(), f.Repo, f.Key, overlay.Change{Deletes: []string{p}}, overlay.CreateOptions{Version: "1.0.1"})
		if !errors.Is(err, manifests.ErrUnsafePath) {
			t.Errorf("create --delete %s: %v, want ErrUnsafePath", p, err)
		}
	}
	// Nor may a crafted, signed one, and the node stays as it was.
	root := f.Provision()
	before := fixture.Snap(t, root)
	m := fixture.HeadManifest(t, root, "1.0.1", nil, []string{"usr"})
	p := filepath.Join(t.TempDir(), "bad.overlay.tar.zst")
	craft(t, p, m, f.Key, nil)
	if _, err := apply(root, p); !errors.Is(err, manifests.ErrUnsafePath) {
		t.Fatalf("apply of an overlay deleting /usr: %v, want ErrUnsafePath", err)
	}
	fixture.AssertUnchanged(t, root, before)
	// An image cannot make /var a symlink either.
	dir := t.TempDir()
	recipe := filepath.Join(dir, "recipe.yaml")
	body := "line: evil\nversion: 1.0.0\nfiles:\n  - path: /var\n    symlink: /tmp\n"
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "out"), builder.WithKey(f.Key)); !errors.Is(err, manifests.ErrUnsafePath) {
		t.Fatalf("building an image whose /var is a symlink: %v, want ErrUnsafePath", err)
	}
}

func TestRegenerateTrustsOnlyItsSigningKey(t *testing.T) {
	f := fixture.New(t)
	f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	dir := t.TempDir()
	if err := sign.Generate(filepath.Join(dir, "op")); err != nil {
		t.Fatal(err)
	}
	op, err := sign.LoadKey(filepath.Join(dir, "op.key"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	_, err = builder.Regenerate(context.Background(), f.Repo, "", "", out, builder.WithKey(op))
	if !errors.Is(err, sign.ErrBadSignature) {
		t.Fatalf("regenerating a repository signed by another key: %v, want ErrBadSignature", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("refused regenerate wrote %d files", len(ents))
	}
	if _, err := builder.Regenerate(context.Background(), f.Repo, "", "", out, builder.WithKey(f.Key)); err != nil {
		t.Fatalf("regenerating with the line's own key: %v", err)
	}
}

// When the ledger already holds an apply and only the cleanup after it
// fails (here: undo data cannot be kept, a mount point sits where it
// goes, so the rename into place fails with EBUSY), the change stays: a
// committed change is never taken back, and the error says it committed.
func TestCommittedChangeNeverTakenBack(t *testing.T) {
	testenv.RequireRoot(t)
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	busy := filepath.Join(root, manifests.StateDir, "undo", "1.0.1")
	if err := os.MkdirAll(busy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", busy, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(busy, unix.MNT_DETACH) })
	_, err := apply(root, c.Path)
	if err == nil || !strings.Contains(err.Error(), "committed") {
		t.Fatalf("apply with unkeepable undo data: %v, want an error saying the change committed", err)
	}
	l := sqLedger(t, root)
	if last := l.Last(); last.Action != manifests.LedgerApply || last.Version != "1.0.1" {
		t.Fatalf("ledger ends with %s %s, want apply 1.0.1", last.Action, last.Version)
	}
	got, err := os.ReadFile(filepath.Join(root, "etc/app/app.conf"))
	if err != nil || string(got) != "port 81\n" {
		t.Fatalf("etc/app/app.conf = %q, %v: the committed change was taken back", got, err)
	}
}

// A disk that fills while the signed manifest is stored fails the apply
// and leaves nothing behind in the manifest store; manifests no applied
// overlay owns (left by a crash) are pruned by the next run's recovery.
func TestDiskFullLeavesNoStoredManifest(t *testing.T) {
	testenv.RequireRoot(t)
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	store := filepath.Join(root, manifests.StateDir, "overlays")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	// One page: the signature fits, the manifest does not.
	if err := unix.Mount("tmpfs", store, "tmpfs", 0, "size=4k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(store, unix.MNT_DETACH) })
	before := fixture.Snap(t, root)
	if _, err := apply(root, c.Path); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("apply onto a full disk: %v, want ENOSPC", err)
	}
	if ents, _ := os.ReadDir(store); len(ents) != 0 {
		t.Fatalf("the failed apply left %d files in the manifest store: %v", len(ents), ents)
	}
	fixture.AssertUnchanged(t, root, before)
	if err := unix.Unmount(store, 0); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []string{"9.9.9.json", "9.9.9.json.minisig", ".1.0.1.json.123456"} {
		if err := os.WriteFile(filepath.Join(store, stale), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := apply(root, c.Path); err != nil {
		t.Fatal(err)
	}
	var names []string
	ents, _ := os.ReadDir(store)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "1.0.1.json 1.0.1.json.minisig" {
		t.Fatalf("manifest store after recovery and apply: %v", names)
	}
}

// The trust store is not tree content: an overlay may not add, replace or
// delete a trusted key, nor hand strata's directories to anyone (issue 7,
// class 3). overlay.Create refuses before anything is signed or written.
func TestTrustStoreIsNotTreeContent(t *testing.T) {
	f := fixture.New(t)
	pub := f.HostFile("untrusted comment: x\nRWQ\n")
	for name, ch := range map[string]overlay.Change{
		"add a key":     {Adds: []overlay.Add{{Dest: "/" + manifests.KeysDir + "/attacker.pub", Src: pub}}},
		"delete a key":  {Deletes: []string{"/" + manifests.KeysDir + "/" + f.Key.ID() + ".pub"}},
		"replace a key": {Adds: []overlay.Add{{Dest: "/" + manifests.KeysDir + "/" + f.Key.ID() + ".pub", Src: pub}}},
	} {
		before, _ := os.ReadDir(filepath.Join(f.Repo, "overlays"))
		_, err := overlay.Create(context.Background(), f.Repo, f.Key, ch, overlay.CreateOptions{Version: "1.0.1"})
		if !errors.Is(err, manifests.ErrUnsafePath) || !strings.Contains(err.Error(), "key") {
			t.Errorf("%s: %v, want ErrUnsafePath about keys", name, err)
		}
		if after, _ := os.ReadDir(filepath.Join(f.Repo, "overlays")); len(after) != len(before) {
			t.Errorf("%s: the refused create wrote to the repository", name)
		}
	}
}

// An overlay named on the command line that is a FIFO or a device is
// refused at once (it is never opened for reading, so it cannot block the
// node lock or feed endless bytes); a symlink to a real overlay is fine.
func TestOverlayFileMustBeRegular(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.overlay.tar.zst")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "FIFO", "/dev/zero": "character device"} {
		done := make(chan error, 1)
		go func() { _, err := apply(root, path); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, manifests.ErrRejected) || !strings.Contains(err.Error(), want) {
				t.Errorf("apply of %s: %v, want a refusal naming a %s", path, err, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("apply of %s blocked", path) // a FIFO without a writer blocks an open for reading
		}
	}
	link := filepath.Join(dir, "link.overlay.tar.zst")
	if err := os.Symlink(c.Path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(root, link); err != nil {
		t.Fatalf("apply through a symlink to the overlay: %v", err)
	}
}
