package disk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/builder/disk/disktest"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// scanEnv makes the test binary a helper that scans a directory and prints
// its tree digest (run inside the private mount namespace of
// mountedDigest).
const scanEnv = "STRATA_TEST_SCAN_DIR"

func TestDiskScanHelper(t *testing.T) {
	dir := os.Getenv(scanEnv)
	if dir == "" {
		return // only runs as TestProvisionDisk's helper process
	}
	es, err := tree.Scan(dir, manifests.IsNodeState)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("digest=%s\n", manifests.TreeDigest(es))
}

func requireDiskTools(t *testing.T) {
	t.Helper()
	testenv.RequireTools(t, testenv.Squashfs, disktest.Tools)
}

func TestProvisionDisk(t *testing.T) {
	requireDiskTools(t)
	key := testKey(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(key))
	trust, _ := key.PublicKeySet()
	ctx := context.Background()
	dir := t.TempDir()
	opts := disk.Options{Size: 512 << 20, NodeID: "node-1", Hostname: "demo1", AuthorizedKeys: []byte("ssh-ed25519 AAAA test\n")}
	d1 := filepath.Join(dir, "one.img")
	r1, err := disk.Provision(ctx, res.Image, d1, trust, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r1.BootEntry || r1.Kernel != "" {
		t.Fatalf("the demo image has no kernel, yet the result says %+v", r1)
	}
	tbl := readGPT(t, d1)
	if len(tbl.Partitions) != 4 {
		t.Fatalf("%d partitions, want 4", len(tbl.Partitions))
	}
	wantTypes := []gpt.Type{disk.TypeESP, disk.TypeRootX8664, disk.TypeRootX8664, disk.TypeLinuxData}
	for i, p := range tbl.Partitions {
		want := r1.Layout.Partitions[i]
		if p.Type != wantTypes[i] || !strings.EqualFold(p.GUID, disk.GUID(res.Digest, "node-1", want.Name)) ||
			int64(p.Start)*512 != want.Offset || int64(p.Size) != want.Size || p.Name != want.Name {
			t.Fatalf("partition %d: %+v, want %+v", i+1, p, want)
		}
	}
	if !strings.EqualFold(tbl.GUID, disk.GUID(res.Digest, "node-1", "disk")) {
		t.Fatalf("disk GUID %s", tbl.GUID)
	}
	if disk.GUID(res.Digest, "node-2", "rootA") == disk.GUID(res.Digest, "node-1", "rootA") {
		t.Fatal("node ids do not change the GUIDs")
	}
	// Provisioning again gives the same partition table, byte for byte.
	d2 := filepath.Join(dir, "two.img")
	if _, err := disk.Provision(ctx, res.Image, d2, trust, opts); err != nil {
		t.Fatal(err)
	}
	size := r1.Layout.Size
	for _, rng := range [][2]int64{{0, 34 * 512}, {size - 33*512, 33 * 512}} {
		if !bytes.Equal(readRange(t, d1, rng[0], rng[1]), readRange(t, d2, rng[0], rng[1])) {
			t.Fatalf("partition tables differ at %d+%d", rng[0], rng[1])
		}
	}

	// Root A is the image, with the image's tree.
	a := r1.Layout.Part(disk.PartRootA)
	if got := mountedDigest(t, d1, a); got != res.ManifestData.TreeDigest {
		t.Fatalf("root A tree digest %s, manifest says %s", got, res.ManifestData.TreeDigest)
	}
	// The ESP and the state filesystem check clean.
	esp := extract(t, d1, r1.Layout.Part(disk.PartESP))
	run(t, "fsck.vfat", "-n", esp)
	espFiles(t, d1, "/EFI/BOOT/BOOTX64.EFI", "/EFI/systemd/systemd-bootx64.efi", "/loader/loader.conf")
	state := extract(t, d1, r1.Layout.Part(disk.PartState))
	run(t, "e2fsck", "-fn", state)
	// The ledger on the state partition names the image.
	var l manifests.Ledger
	if err := manifests.Decode([]byte(run(t, "debugfs", "-R", "cat /"+manifests.LedgerPath, state)), &l); err != nil {
		t.Fatal(err)
	}
	if e := l.Last(); len(l.Entries) != 1 || e.Action != manifests.LedgerProvision || e.Digest != res.Digest || e.TreeDigest != res.ManifestData.TreeDigest {
		t.Fatalf("ledger on the state partition: %+v", l)
	}
	for p, want := range map[string]string{disk.StateNodeIDPath: "node-1\n", disk.StateHostnamePath: "demo1\n", disk.StateAuthorizedKeysPath: string(opts.AuthorizedKeys)} {
		if got := run(t, "debugfs", "-R", "cat /"+p, state); got != want {
			t.Fatalf("%s on the state partition: %q, want %q", p, got, want)
		}
	}
}

func TestProvisionDiskRefusals(t *testing.T) {
	requireDiskTools(t)
	key := testKey(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(key))
	trust, _ := key.PublicKeySet()
	ctx := context.Background()
	dir := t.TempDir()
	d := filepath.Join(dir, "small.img")
	_, err := disk.Provision(ctx, res.Image, d, trust, disk.Options{Size: 100 << 20, NodeID: "n"})
	if !errors.Is(err, disk.ErrTooSmall) || !strings.Contains(err.Error(), "100MiB") || !strings.Contains(err.Error(), "450MiB") {
		t.Fatalf("too small a disk: %v", err)
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused disk was left behind: %v", err)
	}
	// A corrupted manifest fails its signature.
	img := filepath.Join(dir, filepath.Base(res.Image))
	copyFile(t, res.Image, img)
	copyFile(t, res.Manifest+".minisig", strings.TrimSuffix(img, ".squashfs")+".image.json.minisig")
	raw := bytes.Replace(readFile(t, res.Manifest), []byte(`"version"`), []byte(`"version" `), 1)
	if err := os.WriteFile(strings.TrimSuffix(img, ".squashfs")+".image.json", raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := disk.Provision(ctx, img, d, trust, disk.Options{NodeID: "n"}); err == nil {
		t.Fatal("provisioned from a corrupted manifest")
	}
	// A squashfs that differs from its (valid) manifest.
	copyFile(t, res.Manifest, strings.TrimSuffix(img, ".squashfs")+".image.json")
	b := readFile(t, res.Image)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(img, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := disk.Provision(ctx, img, d, trust, disk.Options{NodeID: "n"}); err == nil {
		t.Fatal("provisioned from a corrupted squashfs")
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused disk was left behind: %v", err)
	}
}

func readGPT(t *testing.T, p string) *gpt.Table {
	t.Helper()
	d, err := diskfs.Open(p, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		t.Fatal(err)
	}
	tbl, ok := pt.(*gpt.Table)
	if !ok {
		t.Fatalf("partition table is %T, not GPT", pt)
	}
	return tbl
}

func espFiles(t *testing.T, p string, names ...string) {
	t.Helper()
	d, err := diskfs.Open(p, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(disk.PartESP)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		f, err := fs.OpenFile(n, os.O_RDONLY)
		if err != nil {
			t.Fatalf("ESP %s: %v", n, err)
		}
		b, err := io.ReadAll(f)
		if err != nil || len(b) == 0 {
			t.Fatalf("ESP %s: %d bytes, %v", n, len(b), err)
		}
	}
	if _, err := fs.OpenFile("/loader/entries/strata-1-a.conf", os.O_RDONLY); err == nil {
		t.Fatal("a loader entry without a kernel")
	}
}

func readRange(t *testing.T, p string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// extract copies partition p of the disk image file to a file of its own.
func extract(t *testing.T, file string, p disk.Partition) string {
	t.Helper()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out := filepath.Join(t.TempDir(), p.Name+".img")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, io.NewSectionReader(in, p.Offset, p.Size)); err != nil {
		t.Fatal(err)
	}
	return out
}

// mountedDigest mounts partition p of file (a disk image or a device)
// read-only in a private mount namespace and returns the tree digest of
// what it holds (node state and the embedded manifest left out, as in the
// image manifest's digest).
func mountedDigest(t *testing.T, file string, p disk.Partition) string {
	t.Helper()
	mnt := t.TempDir()
	script := `mount -t squashfs -o loop,ro,offset=$3,sizelimit=$4 "$1" "$2" || exit 1
"$5" -test.run='^TestDiskScanHelper$' -test.count=1; rc=$?
umount "$2"; exit $rc`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
		file, mnt, fmt.Sprint(p.Offset), fmt.Sprint(p.Size), os.Args[0])
	cmd.Env = append(os.Environ(), scanEnv+"="+mnt)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mounting root A: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if d, ok := strings.CutPrefix(line, "digest="); ok {
			return d
		}
	}
	t.Fatalf("no digest from the scan helper: %s", out)
	return ""
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v: %s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.WriteFile(dst, readFile(t, src), 0o644); err != nil {
		t.Fatal(err)
	}
}
