package upgrade_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/builder/disk/disktest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/verity"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/overlay/offline"
	"github.com/strata-dev/strata/upgrade"
)

// recipe is a small bootable-looking image: a kernel and an initrd under
// /boot, the mount points a disk node needs, a service.
const recipe = `line: %s
version: %s
epoch: 1700000000
compressor: zstd
base:
  dir: rootfs
files:
  - path: /state
    dir: true
  - path: /var
    dir: true
  - path: /run
    dir: true
  - path: /etc/release
    content: "%s\n"
%s
services:
  - unit: app.service
    paths: [/etc/app/app.conf]
%s`

const kernelFiles = `  - path: /boot/vmlinuz-6.1.0-%[1]s
    content: "kernel %[1]s\n"
  - path: /boot/initrd.img-6.1.0-%[1]s
    content: "initrd %[1]s\n"
`

var rootfs = map[string]string{
	"etc/app/app.conf":                   "port 80\n",
	"etc/motd":                           "hello\n",
	"usr/bin/app":                        "#!/bin/sh\nexec sleep infinity\n",
	"usr/lib/systemd/system/app.service": "[Service]\nExecStart=/usr/bin/app\n",
}

type env struct {
	dir, disk, repo string
	image           string // the image provisioned, 1.0.0
	key             *sign.Key
	layout          *disk.Layout
	n               int
}

func requireTools(t *testing.T) {
	t.Helper()
	testenv.RequireTools(t, testenv.Squashfs, disktest.Tools)
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

func newKey(t *testing.T) *sign.Key { return testenv.Key(t) }

// build builds an image of line at version with key (nil: unsigned);
// kernel "" leaves the kernel out, extra adds recipe files.
func (e *env) build(t *testing.T, line, version, kernel string, key *sign.Key, extra ...string) string {
	t.Helper()
	e.n++
	dir := filepath.Join(e.dir, fmt.Sprintf("recipe%d", e.n))
	for p, c := range rootfs {
		writeFile(t, filepath.Join(dir, "rootfs", p), c)
	}
	files := strings.Join(extra, "")
	if kernel != "" {
		files += fmt.Sprintf(kernelFiles, kernel)
	}
	// strata (a stand-in binary) and its units, the upgrade
	// confirmation among them; an image without them is refused.
	baked := "strata: {}\n"
	if line == "nostrata" {
		line, baked = "up", ""
	}
	writeFile(t, filepath.Join(dir, "recipe.yaml"), fmt.Sprintf(recipe, line, version, version, files, baked))
	bin := filepath.Join(e.dir, "strata-stand-in")
	writeFile(t, bin, "#!/bin/sh\n")
	opts := []builder.Option{builder.WithStrataBinary(bin)}
	if key != nil {
		opts = append(opts, builder.WithKey(key))
	}
	res, err := builder.Build(context.Background(), filepath.Join(dir, "recipe.yaml"), filepath.Join(dir, "out"), opts...)
	if err != nil {
		t.Fatalf("building %s %s: %v", line, version, err)
	}
	return res.Image
}

// newEnv provisions a disk node of line "up" at image 1.0.0 with the
// overlays 1.0.1 and 1.0.2 applied offline.
func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, disk.Options{}) }

// newEnvWith is newEnv with the disk provisioned with o (its size and
// node ID set here).
func newEnvWith(t *testing.T, o disk.Options) *env {
	t.Helper()
	requireTools(t)
	t.Setenv("TMPDIR", t.TempDir())
	e := &env{dir: t.TempDir(), key: newKey(t)}
	image := e.build(t, "up", "1.0.0", "1", e.key)
	e.repo = filepath.Join(e.dir, "repo")
	if _, err := repo.Init(context.Background(), e.repo, image, e.key); err != nil {
		t.Fatal(err)
	}
	trust, _ := e.key.PublicKeySet()
	e.disk = filepath.Join(e.dir, "node.img")
	o.Size, o.NodeID = 512<<20, "up"
	r, err := disk.Provision(context.Background(), image, e.disk, trust, o)
	if err != nil {
		t.Fatal(err)
	}
	e.layout, e.image = r.Layout, image
	e.overlay(t, "1.0.1", "/etc/app/app.conf", "port 81\n")
	e.overlay(t, "1.0.2", "/usr/share/doc/app/changes", "two\n")
	if _, err := offline.Apply(context.Background(), e.disk, node.Source{Repo: e.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) overlay(t *testing.T, version, dest, content string) *overlay.Created {
	t.Helper()
	src := filepath.Join(e.dir, "src", version)
	writeFile(t, src, content)
	c, err := overlay.Create(context.Background(), e.repo, e.key, overlay.Change{Adds: []overlay.Add{{Dest: dest, Src: src}}}, overlay.CreateOptions{Version: version})
	if err != nil {
		t.Fatalf("creating %s: %v", version, err)
	}
	return c
}

// sum hashes what an upgrade writes: the ESP, both root partitions and
// the node's state (its ledger, staged upgrade and stored images; the
// state partition's own bytes change whenever it is mounted). A refused
// upgrade must not change any of it.
func (e *env) sum(t *testing.T) string {
	t.Helper()
	f, err := os.Open(e.disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	for _, i := range []int{disk.PartESP, disk.PartRootA, disk.PartRootB} {
		p := e.layout.Part(i)
		if _, err := io.Copy(h, io.NewSectionReader(f, p.Offset, p.Size)); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Fprintf(h, "%s\n%s\n%s\n%s", e.state(t, manifests.LedgerPath), e.state(t, manifests.UpgradePath),
		e.debugfs(t, "ls -l /"+manifests.StateDir+"/images"), e.debugfs(t, "ls -l /"+manifests.StateDir+"/layers"))
	return hex.EncodeToString(h.Sum(nil))
}

// esp lists the ESP's files (mtools, read-only).
func (e *env) esp(t *testing.T, dir string) string {
	t.Helper()
	p := e.layout.Part(disk.PartESP)
	cmd := exec.Command("mdir", "-b", "-i", fmt.Sprintf("%s@@%d", e.disk, p.Offset), "::"+dir)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mdir %s: %v: %s", dir, err, out)
	}
	return string(out)
}

func (e *env) espRead(t *testing.T, name string) string {
	t.Helper()
	p := e.layout.Part(disk.PartESP)
	cmd := exec.Command("mtype", "-i", fmt.Sprintf("%s@@%d", e.disk, p.Offset), "::"+name)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mtype %s: %v: %s", name, err, out)
	}
	return string(out)
}

// state reads a file of the state partition (debugfs); "" if missing.
func (e *env) state(t *testing.T, name string) string {
	t.Helper()
	return e.debugfs(t, "cat /"+name)
}

// debugfs runs a debugfs request on a copy of the state partition.
func (e *env) debugfs(t *testing.T, req string) string {
	t.Helper()
	p := e.layout.Part(disk.PartState)
	f, err := os.CreateTemp(t.TempDir(), "state")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	in, err := os.Open(e.disk)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := io.Copy(f, io.NewSectionReader(in, p.Offset, p.Size)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, _ := exec.Command("debugfs", "-R", req, f.Name()).Output()
	return string(out)
}

// Upgrading a disk offline writes root B and a counted boot entry for it,
// stages the upgrade with the layers it keeps, and leaves root A and its
// entry alone; a staged upgrade blocks a second one and applies until it
// is cancelled.
func TestUpgradeDisk(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	next := e.build(t, "up", "1.1.0", "2", e.key)

	before := e.sum(t)
	rep, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.DryRun || rep.Entry != nil || rep.To.Version != "1.1.0" || strings.Join(rep.Layers, " ") != "1.0.1 1.0.2" {
		t.Fatalf("dry run: %+v", rep.UpgradeReport)
	}
	if e.sum(t) != before {
		t.Fatal("a dry run changed the disk")
	}

	var steps []string
	rep, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Slot != manifests.SlotB || rep.Entry == nil || rep.Entry.File != "strata-2-b+3.conf" || rep.Head.Version != "1.0.2" ||
		strings.Join(rep.Layers, " ") != "1.0.1 1.0.2" || rep.From.Version != "1.0.0" || rep.Kernel != "boot/vmlinuz-6.1.0-2" {
		t.Fatalf("upgrade report %+v, entry %+v", rep.UpgradeReport, rep.Entry)
	}
	if !strings.Contains(strings.Join(steps, "\n"), "writing "+next+" to root B") {
		t.Fatalf("progress: %q", steps)
	}
	// Root B holds the image's bytes.
	img, err := os.ReadFile(next)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(e.disk)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(img))
	_, err = f.ReadAt(got, e.layout.Part(disk.PartRootB).Offset)
	f.Close()
	if err != nil || string(got) != string(img) {
		t.Fatalf("root B does not hold the image (%v)", err)
	}
	// Root A's entry (migrated or new) stays, the new one is counted.
	entries := e.esp(t, "/loader/entries")
	if !strings.Contains(entries, "strata-1-a.conf") || !strings.Contains(entries, "strata-2-b+3.conf") || strings.Contains(entries, ".new") {
		t.Fatalf("entries:\n%s", entries)
	}
	entry := e.espRead(t, "/loader/entries/strata-2-b+3.conf")
	if !strings.Contains(entry, "root=PARTUUID="+strings.ToLower(e.layout.Part(disk.PartRootB).GUID)+" ") ||
		!strings.Contains(entry, "linux /strata/b/vmlinuz") || !strings.Contains(entry, "panic=10") {
		t.Fatalf("entry:\n%s", entry)
	}
	if k := e.espRead(t, "/strata/b/vmlinuz"); k != "kernel 2\n" {
		t.Fatalf("root B's kernel: %q", k)
	}
	// Both roots open through dm-verity with their own image's signed
	// root hash, and their verity initrds carry those records.
	for slot, img := range map[string]string{"a": e.image, "b": next} {
		v := verityOf(t, img)
		name := "/loader/entries/strata-1-a.conf"
		if slot == "b" {
			name = "/loader/entries/strata-2-b+3.conf"
		}
		entry := e.espRead(t, name)
		if !strings.Contains(entry, "initrd /strata/"+slot+"/verity.img\ninitrd /strata/"+slot+"/initrd.img\n") ||
			!strings.Contains(entry, "options root=/dev/mapper/strata-root strata.root=PARTUUID=") ||
			!strings.Contains(entry, " strata.verity="+v.RootHash+" ") || strings.Count(entry, "strata.verity=") != 1 {
			t.Fatalf("root %s's entry does not open it verified with %s:\n%s", slot, v.RootHash, entry)
		}
		if cp := e.espRead(t, "/strata/"+slot+"/verity.img"); !strings.Contains(cp, `"root_hash": "`+v.RootHash+`"`) {
			t.Fatalf("root %s's verity initrd lacks its record", slot)
		}
	}
	if k := e.espRead(t, "/strata/a/vmlinuz"); k != "kernel 1\n" {
		t.Fatalf("root A's kernel: %q", k)
	}
	staged := e.state(t, manifests.UpgradePath)
	var u manifests.StagedUpgrade
	if err := manifests.Decode([]byte(staged), &u); err != nil || u.Validate() != nil || u.Record.Version != "1.1.0" || u.Entry != "strata-2-b.conf" || u.BootID != "" {
		t.Fatalf("staged upgrade %v: %s", err, staged)
	}
	// The ledger is unchanged until a healthy boot commits the upgrade.
	if l := e.state(t, manifests.LedgerPath); strings.Contains(l, `"upgrade"`) {
		t.Fatalf("ledger has the upgrade before it booted:\n%s", l)
	}

	// Staged: another upgrade and an apply wait for it.
	third := e.build(t, "up", "1.2.0", "3", e.key)
	before = e.sum(t)
	if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: third}); !errors.Is(err, node.ErrUpgradeStaged) {
		t.Fatalf("second upgrade: %v, want ErrUpgradeStaged", err)
	}
	e.overlay(t, "1.0.3", "/etc/app/app.conf", "port 83\n")
	if _, err := offline.Apply(ctx, e.disk, node.Source{Repo: e.repo}, node.ApplyOptions{}, node.Options{}); !errors.Is(err, node.ErrUpgradeStaged) {
		t.Fatalf("apply while staged: %v, want ErrUpgradeStaged", err)
	}
	if e.sum(t) != before {
		t.Fatal("refusals while staged changed the disk")
	}

	// Cancelled: the entry and the staged state go, root A boots on.
	u2, err := upgrade.CancelDisk(ctx, e.disk, 0)
	if err != nil || u2.Record.Version != "1.1.0" {
		t.Fatalf("cancel: %+v %v", u2, err)
	}
	if entries := e.esp(t, "/loader/entries"); strings.Contains(entries, "strata-2-b") || !strings.Contains(entries, "strata-1-a.conf") {
		t.Fatalf("entries after cancel:\n%s", entries)
	}
	if files := e.esp(t, "/strata/b"); strings.Contains(files, "verity") || strings.Contains(files, "vmlinuz") {
		t.Fatalf("root B's boot files after cancel:\n%s", files)
	}
	if s := e.state(t, manifests.UpgradePath); s != "" {
		t.Fatalf("staged upgrade left after cancel: %s", s)
	}
	if _, err := upgrade.CancelDisk(ctx, e.disk, 0); !errors.Is(err, node.ErrUpgrade) {
		t.Fatalf("cancelling nothing: %v", err)
	}
	if _, err := offline.Apply(ctx, e.disk, node.Source{Repo: e.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatalf("apply after cancel: %v", err)
	}
	// The next upgrade carries the new layer too.
	rep, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: third, Tries: 1})
	if err != nil || rep.Entry.File != "strata-2-b+1.conf" || strings.Join(rep.Layers, " ") != "1.0.1 1.0.2 1.0.3" {
		t.Fatalf("upgrade after cancel: %+v %v", rep, err)
	}
}

// Every refused image leaves the disk as it was, byte for byte, with an
// error that names the problem.
func TestUpgradeDiskRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	other := newKey(t)
	unsigned := e.build(t, "up", "1.1.0", "2", nil)
	big := make([]byte, 70<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	bigFile := filepath.Join(e.dir, "big.bin")
	if err := os.WriteFile(bigFile, big, 0o644); err != nil {
		t.Fatal(err)
	}
	// An image whose verity record is gone, and one whose tree no longer
	// matches its record (a byte of the squashfs changed after the build).
	noRecord := e.build(t, "up", "1.1.0", "2", e.key)
	if err := os.Remove(repo.VerityPath(noRecord)); err != nil {
		t.Fatal(err)
	}
	// (The last byte of the data: squashfs padding, which its tools never
	// read, so only the tree can tell.)
	changed := e.build(t, "up", "1.1.0", "2", e.key)
	cv := verityOf(t, changed)
	flipByte(t, changed, cv.HashOffset-1)
	cases := []struct {
		name, image string
		o           upgrade.Options
		want        error
		says        string
	}{
		{"another line", e.build(t, "down", "2.0.0", "2", e.key), upgrade.Options{}, node.ErrUpgrade, "is of line down"},
		{"older", e.build(t, "up", "0.9.0", "2", e.key), upgrade.Options{}, node.ErrUpgrade, "not newer"},
		{"unsigned", unsigned, upgrade.Options{}, manifests.ErrRejected, "not signed"},
		{"wrong key", e.build(t, "up", "1.1.0", "2", other), upgrade.Options{}, manifests.ErrRejected, "signature"},
		// The overlays require ^1.0.0.
		{"drops layers", e.build(t, "up", "2.0.0", "2", e.key), upgrade.Options{}, node.ErrUpgrade, "1.0.1 (requires image ^1.0.0)"},
		{"no kernel", e.build(t, "up", "1.1.0", "", e.key), upgrade.Options{}, disk.ErrNoKernel, "no kernel"},
		{"too big", e.build(t, "up", "1.1.0", "2", e.key, "  - path: /big\n    src: "+bigFile+"\n"), upgrade.Options{}, disk.ErrTooSmall, "does not fit root B"},
		{"no confirmation unit", e.build(t, "nostrata", "1.1.0", "2", e.key), upgrade.Options{}, node.ErrUpgrade, "has no /usr/lib/systemd/system/strata-upgrade-confirm.service"},
		{"compact, not regenerated", e.build(t, "up", "1.1.0", "2", e.key), upgrade.Options{UpgradeOptions: node.UpgradeOptions{Compact: true}}, node.ErrUpgrade, "not a regenerated image"},
		// Root A boots through dm-verity: never to an unverified root B.
		{"no verity record", noRecord, upgrade.Options{}, disk.ErrUnverifiedRoot, "would boot root B unverified"},
		{"tree does not match its record", changed, upgrade.Options{}, verity.ErrCorrupt, fmt.Sprintf("data block %d ", cv.DataBlocks-1)},
	}
	before := e.sum(t)
	for _, c := range cases {
		c.o.Image = c.image
		_, err := upgrade.Disk(ctx, e.disk, c.o)
		if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.says) {
			t.Errorf("%s: %v; want %v saying %q", c.name, err, c.want, c.says)
		}
		if e.sum(t) != before {
			t.Fatalf("%s: the refused upgrade changed the disk", c.name)
		}
	}
	if !errors.Is(node.ErrUpgrade, manifests.ErrRejected) || !errors.Is(disk.ErrTooSmall, manifests.ErrRejected) {
		t.Error("upgrade refusals are not rejections (exit 3)")
	}

	// --drop-layers takes them off instead.
	rep, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: cases[4].image, DryRun: true, UpgradeOptions: node.UpgradeOptions{DropLayers: true}})
	if err != nil || len(rep.Layers) != 0 || len(rep.Dropped) != 2 || rep.Head.Version != "1.0.0" {
		t.Fatalf("--drop-layers: %+v %v", rep, err)
	}
}

// Compaction switches to the line's regenerated image of the node's
// head: one whose head is not the node's is refused; the right one is
// staged with no layers, the head and tree unchanged.
func TestUpgradeDiskCompact(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c3 := e.overlay(t, "1.0.3", "/etc/app/app.conf", "port 83\n")
	if _, err := offline.Apply(ctx, e.disk, node.Source{Repo: e.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	old, err := builder.Regenerate(ctx, e.repo, "", "1.0.2", filepath.Join(e.dir, "regen-old"), builder.WithKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	before := e.sum(t)
	o := upgrade.Options{UpgradeOptions: node.UpgradeOptions{Compact: true}}
	o.Image = old.Image
	if _, err := upgrade.Disk(ctx, e.disk, o); !errors.Is(err, node.ErrUpgrade) || !strings.Contains(err.Error(), "regenerate through the node's head") {
		t.Fatalf("compacting onto an older head: %v", err)
	}
	o.Compact = false
	if _, err := upgrade.Disk(ctx, e.disk, o); !errors.Is(err, node.ErrUpgrade) || !strings.Contains(err.Error(), "--compact") {
		t.Fatalf("a regenerated image without --compact: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("a refused compaction changed the disk")
	}
	head, err := builder.Regenerate(ctx, e.repo, "", "1.0.3", filepath.Join(e.dir, "regen"), builder.WithKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	o.Image, o.Compact = head.Image, true
	rep, err := upgrade.Disk(ctx, e.disk, o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Compact || len(rep.Layers) != 0 || rep.Head.Version != "1.0.3" || rep.TreeDigest != c3.Manifest.TreeDigest {
		t.Fatalf("compaction: %+v", rep.UpgradePlan)
	}

	// A node on a regenerated image (here provisioned from one) has
	// overlays no layer holds: an image of a recipe would lose them.
	trust, _ := e.key.PublicKeySet()
	folded := filepath.Join(e.dir, "folded.img")
	if _, err := disk.Provision(ctx, head.Image, folded, trust, disk.Options{Size: 512 << 20, NodeID: "folded"}); err != nil {
		t.Fatal(err)
	}
	next := e.build(t, "up", "1.1.0", "2", e.key)
	for _, drop := range []bool{false, true} {
		o = upgrade.Options{Image: next, DryRun: true, UpgradeOptions: node.UpgradeOptions{DropLayers: drop}}
		_, err = upgrade.Disk(ctx, folded, o)
		if !errors.Is(err, node.ErrUpgrade) || !strings.Contains(err.Error(), "folds the line's overlays through 1.0.3") {
			t.Fatalf("upgrading a node on a regenerated image to a recipe's (--drop-layers %v): %v", drop, err)
		}
	}
}

// verityOf loads the signed verity record beside img.
func verityOf(t *testing.T, img string) *manifests.Verity {
	t.Helper()
	im, err := repo.LoadImage(img, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := repo.LoadVerity(img, im, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// flipByte inverts the byte at off of file p.
func flipByte(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// After a key rotation an image built with the new key trusts only it:
// the layers signed before the rotation are not signed by a key it
// trusts, so its activation would refuse them. The upgrade names them
// before anything is written, and --drop-layers takes them off.
func TestUpgradeDiskKeysRotatedPastLayers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	next := newKey(t)
	if _, err := overlay.RotateKeys(ctx, e.repo, e.key, overlay.RotateOptions{Version: "1.0.3", Add: [][]byte{next.PublicText()}, Revoke: []string{e.key.ID()}, IndexKey: next}); err != nil {
		t.Fatal(err)
	}
	if _, err := offline.Apply(ctx, e.disk, node.Source{Repo: e.repo}, node.ApplyOptions{}, node.Options{}); err != nil {
		t.Fatal(err)
	}
	image := e.build(t, "up", "1.1.0", "2", next)
	before := e.sum(t)
	_, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: image})
	if !errors.Is(err, node.ErrUpgrade) || !strings.Contains(fmt.Sprint(err), "1.0.1 (its record is not signed by a key the image trusts") {
		t.Fatalf("upgrade to an image of the rotated key only: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the refused upgrade changed the disk")
	}
	rep, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: image, DryRun: true, UpgradeOptions: node.UpgradeOptions{DropLayers: true}})
	if err != nil || len(rep.Layers) != 0 || len(rep.Dropped) != 3 || rep.Head.Version != "1.0.0" {
		t.Fatalf("--drop-layers: %+v %v", rep, err)
	}
}
