package overlayfs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nodestate/overlayfs"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// mountID returns the id of the mount p is on.
func mountID(t *testing.T, p string) uint64 {
	t.Helper()
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 {
		t.Fatalf("statx %s: %v (mask %#x)", p, err, stx.Mask)
	}
	return stx.Mnt_id
}

// A node of layer images over a squashfs root is sealed: its root's
// mount and its stacks are the mounts its managed files may be on, and an
// apply does not read the content of what it replaces there (no hand
// edit can reach it). A file a bind mount covers is still a change on
// the node: the apply is refused, naming it, and goes ahead once the
// mount is gone.
func TestSealedNodeLocalEdits(t *testing.T) {
	ctx := context.Background()
	l := newLine(t, "line: l\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\nfiles:\n  - path: /var\n    dir: true\n  - path: /run\n    dir: true\n", map[string]string{"rootfs/etc/app.conf": "port 80\n", "rootfs/etc/motd": "hi\n", "rootfs/usr/share/doc": "doc\n"})
	root := newNode(t, l.res.Image)
	sealed := func() map[uint64]bool {
		t.Helper()
		b, err := nodestate.OpenBackend(nodestate.Node{Root: root}, nodestate.BackendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := b.(*overlayfs.Backend).SealedMounts()
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	// No layer yet: every managed file is on the root's squashfs.
	if ids := sealed(); len(ids) != 1 || !ids[mountID(t, filepath.Join(root, "etc/motd"))] {
		t.Fatalf("sealed mounts of a node without layers: %v, want only the root's", ids)
	}
	src := filepath.Join(l.dir, "src")
	if err := os.WriteFile(src, []byte("port 81\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	create := func(v string, dests ...string) string {
		t.Helper()
		var ch overlay.Change
		for _, d := range dests {
			ch.Adds = append(ch.Adds, overlay.Add{Dest: d, Src: src})
		}
		c, err := overlay.Create(ctx, l.repo, l.key, ch, overlay.CreateOptions{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		return c.Path
	}
	apply := func(p string) error {
		_, err := nodetest.Apply(ctx, root, node.Source{Files: []string{p}}, node.ApplyOptions{}, node.Options{})
		return err
	}
	if err := apply(create("1.0.1", "/etc/app.conf")); err != nil {
		t.Fatal(err)
	}
	ids := sealed()
	etc, usr := mountID(t, filepath.Join(root, "etc/motd")), mountID(t, filepath.Join(root, "usr/share/doc"))
	if len(ids) != 2 || !ids[etc] || !ids[usr] || etc == usr {
		t.Fatalf("sealed mounts %v, want the /etc stack %d and the root %d", ids, etc, usr)
	}

	// A file bind-mounted over /etc/motd, which 1.0.2 replaces.
	cover := filepath.Join(l.dir, "cover")
	if err := os.WriteFile(cover, []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	motd := filepath.Join(root, "etc/motd")
	if err := unix.Mount(cover, motd, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(motd, unix.MNT_DETACH) })
	next := create("1.0.2", "/etc/motd", "/usr/share/doc")
	before := fixture.Snap(t, root)
	fixture.ErrIs(t, apply(next), node.ErrLocalEdit, "/etc/motd covered by a mount on the node")
	fixture.AssertUnchanged(t, root, before)
	if err := unix.Unmount(motd, 0); err != nil {
		t.Fatal(err)
	}
	if err := apply(next); err != nil {
		t.Fatalf("apply once the mount is gone: %v", err)
	}
	for _, p := range []string{"etc/motd", "usr/share/doc"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != "port 81\n" {
			t.Errorf("/%s after 1.0.2: %q, %v", p, b, err)
		}
	}
}
