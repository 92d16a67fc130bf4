package offline_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/node/restarter"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/overlay/offline"
)

// nodeRecipe is a small image with the layout a disk node needs: /state,
// /var and /run to mount on, a service, configuration under /etc and
// files under /usr.
const nodeRecipe = `line: disknode
version: 1.0.0
epoch: 1700000000
base:
  dir: rootfs
files:
  - path: /state
    dir: true
  - path: /var
    dir: true
  - path: /run
    dir: true
services:
  - unit: app.service
    paths: [/etc/app/app.conf]
    # The disk's own program: never run on the host that applies offline
    # (it would fail here: the image has no such file).
    validate: [/usr/bin/app-validate]
`

var nodeRootfs = map[string]string{
	"etc/app/app.conf":                   "port 80\n",
	"etc/motd":                           "hello\n",
	"usr/bin/app":                        "#!/bin/sh\nexec sleep infinity\n",
	"usr/lib/systemd/system/app.service": "[Service]\nExecStart=/usr/bin/app\n",
	"usr/share/doc/app/readme":           "docs\n",
}

// offlineEnv is a provisioned disk and the repository of its line.
type offlineEnv struct {
	dir, disk, repo string
	key             *sign.Key
	layout          *disk.Layout
}

func newOfflineEnv(t *testing.T) *offlineEnv {
	t.Helper()
	requireDiskTools(t)
	e := &offlineEnv{dir: t.TempDir(), key: testKey(t)}
	// Mount points go to a directory of this test's own, where
	// requireNoLeftovers looks.
	t.Setenv("TMPDIR", t.TempDir())
	rdir := filepath.Join(e.dir, "recipe")
	for p, content := range nodeRootfs {
		writeFile(t, filepath.Join(rdir, "rootfs", p), content)
	}
	writeFile(t, filepath.Join(rdir, "recipe.yaml"), nodeRecipe)
	res, err := builder.Build(context.Background(), filepath.Join(rdir, "recipe.yaml"), filepath.Join(e.dir, "images"), builder.WithKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	e.repo = filepath.Join(e.dir, "repo")
	if _, err := repo.Init(context.Background(), e.repo, res.Image, e.key); err != nil {
		t.Fatal(err)
	}
	trust, _ := e.key.PublicKeySet()
	e.disk = filepath.Join(e.dir, "node.img")
	r, err := disk.Provision(context.Background(), res.Image, e.disk, trust, disk.Options{NodeID: "offline"})
	if err != nil {
		t.Fatal(err)
	}
	e.layout = r.Layout
	return e
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// create makes overlay version from adds (image path -> content) and
// deletes.
func (e *offlineEnv) create(t *testing.T, version string, adds map[string]string, deletes ...string) *overlay.Created {
	t.Helper()
	var ch overlay.Change
	for dest, content := range adds {
		src := filepath.Join(e.dir, "src", version, dest)
		writeFile(t, src, content)
		ch.Adds = append(ch.Adds, overlay.Add{Dest: dest, Src: src})
	}
	ch.Deletes = deletes
	// app-validate is the disk's own program, and the image has none: the
	// publisher cannot run it, and says why it publishes all the same.
	c, err := overlay.Create(context.Background(), e.repo, e.key, ch, overlay.CreateOptions{Version: version, SkipValidation: "app-validate runs on the node only"})
	if err != nil {
		t.Fatalf("creating %s: %v", version, err)
	}
	return c
}

// nodeState is what a refused apply must leave alone: the ledger and the
// layer directories on the state partition, read with debugfs.
func (e *offlineEnv) nodeState(t *testing.T) string {
	t.Helper()
	state := extract(t, e.disk, e.layout.Part(disk.PartState))
	defer os.Remove(state)
	ledger := run(t, "debugfs", "-R", "cat /"+manifests.LedgerPath, state)
	layers := run(t, "debugfs", "-R", "ls -p /"+manifests.StateDir+"/layers", state)
	return ledger + "\n" + layers
}

// requireNoLeftovers fails if a mount, a loop device or a mount point of
// the offline work is left.
func requireNoLeftovers(t *testing.T, diskPath string) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if strings.Contains(line, "strata-disk-") {
			t.Errorf("mount left behind: %s", line)
		}
	}
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	if err != nil {
		t.Fatalf("losetup -a: %v: %s", err, out)
	}
	if strings.Contains(string(out), diskPath) {
		t.Errorf("loop device left behind on %s:\n%s", diskPath, out)
	}
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), "strata-disk-*")); len(left) > 0 {
		t.Errorf("mount points left behind: %v", left)
	}
}

// Overlays applied to a disk that is not running take effect in its
// layers and ledger, pass the file audit, and a gap or a bad payload is
// refused with the disk unchanged; nothing stays mounted or attached.
func TestOfflineDisk(t *testing.T) {
	e := newOfflineEnv(t)
	ctx := context.Background()
	c1 := e.create(t, "1.0.1", map[string]string{"/etc/app/app.conf": "port 81\n", "/etc/motd.d/10-strata": "layer one\n"})
	c2 := e.create(t, "1.0.2", map[string]string{"/usr/share/doc/app/changes": "two\n"}, "/etc/motd")
	c3 := e.create(t, "1.0.3", map[string]string{"/etc/app/app.conf": "port 83\n"})
	c4 := e.create(t, "1.0.4", map[string]string{"/etc/app/extra.conf": "four\n"})
	c5 := e.create(t, "1.0.5", map[string]string{"/etc/app/extra.conf": "five\n"})

	var steps []string
	rep, err := offline.Apply(ctx, e.disk, node.Source{Files: []string{c1.Path, c2.Path, c3.Path}},
		node.ApplyOptions{}, node.Options{Progress: func(s string) { steps = append(steps, s) }, Restarter: restarter.Systemd{}})
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, e.disk)
	if rep.Root != e.disk || rep.From.Version != "1.0.0" || rep.To.Version != "1.0.3" || len(rep.Plans) != 3 {
		t.Fatalf("report %+v", rep)
	}
	// The disk is not running: its restarts are debt, whatever restarter
	// was asked for.
	if len(rep.Pending) != 1 || rep.Pending[0].Unit != "app.service" {
		t.Fatalf("pending restarts %+v, want app.service", rep.Pending)
	}
	if !strings.Contains(strings.Join(steps, "\n"), "mounting root A") {
		t.Fatalf("progress: %q", steps)
	}

	a, err := offline.Verify(ctx, e.disk, node.VerifyOptions{Repo: e.repo, Files: true})
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, e.disk)
	if !a.OK() || !a.FilesChecked || a.TreeDigest != c3.Manifest.TreeDigest || a.Head.Version != "1.0.3" || a.Behind != 2 {
		t.Fatalf("audit of the disk: ok=%v files=%v tree %s (want %s) head %+v behind %d: %+v",
			a.OK(), a.FilesChecked, a.TreeDigest, c3.Manifest.TreeDigest, a.Head, a.Behind, a.Findings)
	}

	// The mounted node shows the layered tree.
	readNode(t, e.disk, map[string]string{"etc/app/app.conf": "port 83\n", "etc/motd.d/10-strata": "layer one\n",
		"usr/share/doc/app/changes": "two\n", "etc/motd": ""})

	// A gap (1.0.5 without 1.0.4) is refused; the disk is unchanged.
	before := e.nodeState(t)
	_, err = offline.Apply(ctx, e.disk, node.Source{Files: []string{c5.Path}}, node.ApplyOptions{}, node.Options{})
	if !errors.Is(err, overlay.ErrSequence) {
		t.Fatalf("applying 1.0.5 on 1.0.3: %v, want a sequence error", err)
	}
	requireNoLeftovers(t, e.disk)
	if after := e.nodeState(t); after != before {
		t.Fatalf("a refused gap changed the disk:\n%s\n---\n%s", before, after)
	}

	// A payload that does not match its manifest is refused.
	bad := filepath.Join(e.dir, "bad.overlay.tar.zst")
	raw, err := os.ReadFile(c4.Path)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-20] ^= 0xff
	if err := os.WriteFile(bad, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := offline.Apply(ctx, e.disk, node.Source{Files: []string{bad}}, node.ApplyOptions{}, node.Options{}); err == nil {
		t.Fatal("a tampered overlay was applied")
	}
	requireNoLeftovers(t, e.disk)
	if after := e.nodeState(t); after != before {
		t.Fatalf("a refused payload changed the disk:\n%s\n---\n%s", before, after)
	}

	// Catching up from the repository works offline too.
	rep, err = offline.Apply(ctx, e.disk, node.Source{Repo: e.repo}, node.ApplyOptions{}, node.Options{})
	if err != nil || rep.To.Version != "1.0.5" {
		t.Fatalf("catching up: %+v, %v", rep, err)
	}
	a, err = offline.Verify(ctx, e.disk, node.VerifyOptions{Repo: e.repo, Files: true})
	if err != nil || !a.OK() || a.TreeDigest != c5.Manifest.TreeDigest || a.Behind != 0 {
		t.Fatalf("audit after catching up: %v %+v", err, a)
	}
	requireNoLeftovers(t, e.disk)
}

// readNode mounts the disk's node and checks file contents ("" for a
// file that must not exist).
func readNode(t *testing.T, diskPath string, want map[string]string) {
	t.Helper()
	n, err := offline.Mount(context.Background(), diskPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		requireNoLeftovers(t, diskPath)
	}()
	for p, content := range want {
		got, err := os.ReadFile(filepath.Join(n.Root, p))
		switch {
		case content == "" && !errors.Is(err, os.ErrNotExist):
			t.Errorf("/%s: %q, %v; want it deleted", p, got, err)
		case content != "" && (err != nil || string(got) != content):
			t.Errorf("/%s: %q, %v; want %q", p, got, err, content)
		}
	}
}

// A disk in use (another holder of its lock, as a running qemu would
// be), a file that is not a node disk, and a mounted block device are
// refused, leaving nothing mounted.
func TestOfflineDiskRefusals(t *testing.T) {
	e := newOfflineEnv(t)
	ctx := context.Background()
	f, err := os.OpenFile(e.disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	if _, err := offline.Verify(ctx, e.disk, node.VerifyOptions{}); !errors.Is(err, disk.ErrInUse) {
		t.Fatalf("verifying a locked disk: %v, want ErrInUse", err)
	}
	f.Close()
	requireNoLeftovers(t, e.disk)

	plain := filepath.Join(e.dir, "plain.img")
	if err := os.WriteFile(plain, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := offline.Verify(ctx, plain, node.VerifyOptions{}); !errors.Is(err, disk.ErrNotNodeDisk) {
		t.Fatalf("verifying a blank file: %v, want ErrNotNodeDisk", err)
	}
	requireNoLeftovers(t, plain)

	// A block device works like a file (a loop device here)...
	dev := attachLoop(t, e.disk)
	a, err := offline.Verify(ctx, dev, node.VerifyOptions{Files: true})
	if err != nil || !a.OK() {
		t.Fatalf("verifying %s: %v %+v", dev, err, a)
	}
	requireNoLeftovers(t, "("+dev+")")
	// ... but not while it is mounted. (This kernel does not scan the
	// partitions of loop devices, so the mounted device here is one that
	// holds the state filesystem itself.)
	stateDev := attachLoop(t, extract(t, e.disk, e.layout.Part(disk.PartState)))
	mnt := t.TempDir()
	if err := unix.Mount(stateDev, mnt, "ext4", unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	_, err = offline.Verify(ctx, stateDev, node.VerifyOptions{})
	if uerr := unix.Unmount(mnt, 0); uerr != nil {
		t.Error(uerr)
	}
	if !errors.Is(err, disk.ErrMounted) {
		t.Fatalf("verifying the mounted %s: %v, want ErrMounted", stateDev, err)
	}
}

// attachLoop attaches file to a loop device until the test ends.
func attachLoop(t *testing.T, file string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", file).Output()
	if err != nil {
		t.Fatalf("attaching %s: %v", file, err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// Outside a private mount namespace nothing is mounted.
func TestMountNodeNeedsPrivateNamespace(t *testing.T) {
	t.Setenv("STRATA_PRIVATE_MOUNT_NS", "")
	if _, err := offline.Mount(context.Background(), "/nonexistent", nil); !errors.Is(err, disk.ErrNotPrivate) {
		t.Fatalf("MountNode outside a private namespace: %v", err)
	}
}

// A mount over a file of a stacked hierarchy (systemd's transient
// /etc/machine-id over the image's empty one) is the node's own data, as
// a mount over an unstacked one is: the file audit reads the stacks, not
// what is mounted on them.
func TestOfflineAuditIgnoresMountsOnStacks(t *testing.T) {
	e := newOfflineEnv(t)
	ctx := context.Background()
	c1 := e.create(t, "1.0.1", map[string]string{"/etc/app/app.conf": "port 81\n", "/usr/share/doc/app/changes": "one\n"})
	if _, err := offline.Apply(ctx, e.disk, node.Source{Files: []string{c1.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	n, err := offline.Mount(ctx, e.disk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
		requireNoLeftovers(t, e.disk)
	}()
	over := filepath.Join(n.Root, "run", "machine-id")
	writeFile(t, over, "0123456789abcdef0123456789abcdef\n")
	for _, target := range []string{"etc/motd", "usr/share/doc/app/readme"} {
		if err := unix.Mount(over, filepath.Join(n.Root, target), "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
	}
	a, err := nodetest.Verify(ctx, n.Root, node.VerifyOptions{Files: true})
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK() || a.TreeDigest != c1.Manifest.TreeDigest {
		t.Fatalf("audit with files mounted over the stacks: tree %s, want %s: %+v", a.TreeDigest, c1.Manifest.TreeDigest, a.Findings)
	}
}

// restart-pending --disk (issue 25, item 10): the debt an offline apply
// leaves is settled with a restart record marked offline (nothing runs:
// the next boot starts every service with the tree); with no debt the
// disk is read-only and unchanged.
func TestOfflineSettlePending(t *testing.T) {
	e := newOfflineEnv(t)
	ctx := context.Background()
	c1 := e.create(t, "1.0.1", map[string]string{"/etc/app/app.conf": "port 81\n"})
	if _, err := offline.Apply(ctx, e.disk, node.Source{Files: []string{c1.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	rep, err := offline.SettlePending(ctx, e.disk, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, e.disk)
	if rep.Root != e.disk || len(rep.Pending) != 1 || rep.Pending[0].Unit != "app.service" || len(rep.Restarted) != 1 {
		t.Fatalf("settle report %+v", rep)
	}
	st, err := offline.Status(ctx, e.disk)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 0 {
		t.Fatalf("status after restart-pending --disk: pending %+v", st.Pending)
	}
	ledger := e.nodeState(t)
	if !strings.Contains(ledger, `"action": "restart"`) || !strings.Contains(ledger, `"offline": true`) {
		t.Fatalf("no restart record marked offline in the ledger:\n%s", ledger)
	}
	before := sha256File(t, e.disk)
	rep, err = offline.SettlePending(ctx, e.disk, node.Options{})
	if err != nil || len(rep.Pending) != 0 {
		t.Fatalf("second restart-pending --disk: %v, %+v", err, rep)
	}
	if sha256File(t, e.disk) != before {
		t.Fatal("restart-pending --disk with no debt changed the disk")
	}
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
