package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// rbTree makes a host tree for overlay.Change.Tree: files maps image paths to
// content, each created with the given mode and owner. Directories are
// root-owned 0755, as the image's are.
func rbTree(t *testing.T, files map[string]string, mode os.FileMode, uid, gid int) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(full, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func rollback(t *testing.T, root string) *node.RollbackReport {
	t.Helper()
	rep, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	return rep
}

func TestRollbackRestoresExactTree(t *testing.T) {
	testenv.RequireRoot(t)
	f := fixture.New(t)
	// 1.0.1 adds a setuid binary owned by 1234:1234.
	suidTree := rbTree(t, map[string]string{"usr/bin/suid": "#!/bin/sh\n"}, 0o755|os.ModeSetuid, 1234, 1234)
	c1 := f.Create("1.0.1", overlay.Change{Tree: suidTree})
	if e := c1.Manifest.Entries; len(e) != 1 || e[0].Mode != 0o4755 || e[0].UID != 1234 {
		t.Fatalf("1.0.1 entries = %+v, want one setuid file owned by 1234", e)
	}
	// 1.0.2 deletes it, deletes a directory tree and a symlink, replaces a
	// directory by a file, changes the mode and owner of a file, and
	// modifies and adds files.
	ch := sqRichChange(f)
	ch.Deletes = append(ch.Deletes, "/usr/bin/suid")
	ch.Tree = rbTree(t, map[string]string{"etc/motd": "hello\n"}, 0o640, 0, 5)
	c2 := f.Create("1.0.2", ch)
	metaChanged := false
	for _, e := range c2.Manifest.Entries {
		metaChanged = metaChanged || (e.Path == "etc/motd" && e.Mode == 0o640 && e.GID == 5)
	}
	if !metaChanged {
		t.Fatalf("1.0.2 entries = %+v, want a mode and owner change of etc/motd", c2.Manifest.Entries)
	}

	root := f.Provision()
	base := fixture.Snap(t, root)
	fixture.MustApply(t, root, c1.Path)
	s1 := fixture.Snap(t, root)
	suid := filepath.Join(root, "usr/bin/suid")
	if mode, uid, gid := fixture.Stat(t, suid); mode&os.ModeSetuid == 0 || mode.Perm() != 0o755 || uid != 1234 || gid != 1234 {
		t.Fatalf("applied setuid file has mode %v owner %d:%d", mode, uid, gid)
	}
	fixture.MustApply(t, root, c2.Path)
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c2.Manifest.TreeDigest {
		t.Fatalf("after 1.0.2 digest %s, want %s", a.TreeDigest, c2.Manifest.TreeDigest)
	}
	if _, err := os.Lstat(suid); err == nil {
		t.Fatal("1.0.2 did not delete the setuid file")
	}

	rep := rollback(t, root)
	if rep.Reverted != (manifests.Ref{Version: "1.0.2", Digest: c2.Digest}) || rep.Head != (manifests.Ref{Version: "1.0.1", Digest: c1.Digest}) {
		t.Errorf("rollback report %v -> %v", rep.Reverted, rep.Head)
	}
	if got := fixture.Snap(t, root).Digest; got != s1.Digest {
		t.Fatalf("rollback of 1.0.2: digest %s, want %s", got, s1.Digest)
	}
	if mode, uid, gid := fixture.Stat(t, suid); mode&os.ModeSetuid == 0 || mode.Perm() != 0o755 || uid != 1234 || gid != 1234 {
		t.Errorf("restored setuid file has mode %v owner %d:%d", mode, uid, gid)
	}
	if mode, _, gid := fixture.Stat(t, filepath.Join(root, "etc/motd")); mode.Perm() != 0o644 || gid != 0 {
		t.Errorf("restored /etc/motd has mode %v group %d", mode, gid)
	}
	if mode, _, _ := fixture.Stat(t, filepath.Join(root, "etc/app/conf.d")); !mode.IsDir() {
		t.Errorf("restored /etc/app/conf.d is %v, want a directory", mode)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/share/doc/readme")); err != nil || string(b) != "docs\n" {
		t.Errorf("restored /usr/share/doc/readme: %q %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "etc/link")); err != nil || target != "app" {
		t.Errorf("restored /etc/link -> %q %v", target, err)
	}
	l := sqLedger(t, root)
	if got := sqActions(l); !slices.Equal(got, []string{"provision 1.0.0", "apply 1.0.1", "apply 1.0.2", "rollback 1.0.2"}) {
		t.Errorf("ledger = %v", got)
	}
	if last := l.Last(); last.Head != rep.Head || last.TreeDigest != c1.Manifest.TreeDigest {
		t.Errorf("rollback record head %v tree %s, want %v %s", last.Head, last.TreeDigest, rep.Head, c1.Manifest.TreeDigest)
	}
	if got := sqApplied(t, root); !slices.Equal(got, []string{"1.0.1"}) {
		t.Errorf("applied = %v", got)
	}
	requireExists(t, undoPath(root, "1.0.2"), false)
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))

	// A second rollback goes back to the image.
	rep = rollback(t, root)
	if rep.Reverted.Version != "1.0.1" || rep.Head.Version != "1.0.0" {
		t.Errorf("second rollback %v -> %v", rep.Reverted, rep.Head)
	}
	if got := fixture.Snap(t, root).Digest; got != base.Digest {
		t.Fatalf("second rollback: digest %s, want %s", got, base.Digest)
	}
	if got := sqApplied(t, root); len(got) != 0 {
		t.Errorf("applied = %v", got)
	}
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))

	// Nothing is left to roll back.
	before := fixture.Snap(t, root)
	_, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	fixture.ErrIs(t, err, node.ErrNothingToRollback, "1.0.0")
	fixture.AssertUnchanged(t, root, before)

	// Both overlays apply again.
	fixture.MustApply(t, root, c1.Path, c2.Path)
	a = fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c2.Manifest.TreeDigest {
		t.Errorf("re-applied digest %s, want %s", a.TreeDigest, c2.Manifest.TreeDigest)
	}
	if got := sqActions(sqLedger(t, root)); len(got) != 7 {
		t.Errorf("ledger = %v, want 7 records", got)
	}
}

func TestRollbackFreshNode(t *testing.T) {
	f := fixture.New(t)
	root := f.Provision()
	before := fixture.Snap(t, root)
	_, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	fixture.ErrIs(t, err, node.ErrNothingToRollback, root, "1.0.0")
	fixture.AssertUnchanged(t, root, before)
}

// A file replaced by a directory holding new files: overlay.Create accepts it (the
// folded state is valid) so Apply must too, and Rollback must bring the
// file back.
func TestRollbackFileReplacedByDirectory(t *testing.T) {
	f := fixture.New(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "inner"), []byte("inner\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := f.Create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/motd", Src: dir}}})
	root := f.Provision()
	before := fixture.Snap(t, root)
	if _, err := apply(root, c.Path); err != nil {
		t.Fatalf("applying a file replaced by a directory: %v", err)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Fatalf("digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
	rollback(t, root)
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Fatalf("rollback: digest %s, want %s", got, before.Digest)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/motd")); err != nil || string(b) != "hello\n" {
		t.Errorf("restored /etc/motd: %q %v", b, err)
	}
}

// Rolling back an overlay that added a directory tree removes all of it,
// and the overlay applies again afterwards.
func TestRollbackNewTreeThenReapply(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", overlay.Change{Adds: []overlay.Add{
		{Dest: "/opt/tool/bin/tool", Src: f.HostFile("tool\n")},
		{Dest: "/opt/tool/share/data", Src: f.HostFile("data\n")},
	}})
	root := f.Provision()
	before := fixture.Snap(t, root)
	fixture.MustApply(t, root, c.Path)
	rollback(t, root)
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Fatalf("rollback: digest %s, want %s", got, before.Digest)
	}
	if _, err := os.Lstat(filepath.Join(root, "opt")); err == nil {
		t.Error("/opt survived the rollback")
	}
	fixture.MustApply(t, root, c.Path)
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Errorf("re-applied digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
	l := sqLedger(t, root)
	if sqCount(l, manifests.LedgerApply, "1.0.1") != 2 || sqCount(l, manifests.LedgerRollback, "1.0.1") != 1 {
		t.Errorf("ledger = %v", sqActions(l))
	}
}

// A directory's owner and mode change in place (a meta op); rollback puts
// them back. overlay.Create keeps head directory metadata, so the overlay is
// crafted.
func TestRollbackDirectoryMetaChange(t *testing.T) {
	testenv.RequireRoot(t)
	f := fixture.New(t)
	root := f.Provision()
	before := fixture.Snap(t, root)
	dirEntry := manifests.Entry{Path: "etc/app", Type: manifests.TypeDir, Mode: 0o2750, UID: 0, GID: 5}
	data := []byte("meta\n")
	file := manifests.Entry{Path: "etc/app/meta", Type: manifests.TypeFile, Mode: 0o640, GID: 5, Size: int64(len(data)), SHA256: sqSHA(data)}
	m := fixture.HeadManifest(t, root, "1.0.1", []manifests.Entry{dirEntry, file}, nil)
	p := filepath.Join(t.TempDir(), "test-1.0.1.overlay.tar.zst")
	craft(t, p, m, f.Key, []member{{Hdr: tree.Header(dirEntry, 1700000000)}, fixture.FileMember(file, data)})
	fixture.MustApply(t, root, p)
	if mode, uid, gid := fixture.Stat(t, filepath.Join(root, "etc/app")); mode&os.ModeSetgid == 0 || mode.Perm() != 0o750 || uid != 0 || gid != 5 {
		t.Fatalf("applied /etc/app: %v %d:%d", mode, uid, gid)
	}
	if a := fixture.Audit(t, root, "", true); !a.OK() || a.TreeDigest != m.TreeDigest {
		t.Fatalf("audit after apply: %+v", a)
	}
	rollback(t, root)
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Fatalf("rollback: digest %s, want %s", got, before.Digest)
	}
	if mode, uid, gid := fixture.Stat(t, filepath.Join(root, "etc/app")); mode&os.ModeSetgid != 0 || mode.Perm() != 0o755 || uid != 0 || gid != 0 {
		t.Errorf("restored /etc/app: %v %d:%d, want 0755 root:root", mode, uid, gid)
	}
}
