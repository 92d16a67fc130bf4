package disk_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/manifests"
)

// TestProvisionDiskDevice provisions a loop device (the whole device, in
// place) and reads it back through its backing file.
func TestProvisionDiskDevice(t *testing.T) {
	requireDiskTools(t)
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Fatal("losetup (util-linux) is required")
	}
	key := testKey(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(key))
	trust, _ := key.PublicKeySet()
	backing := filepath.Join(t.TempDir(), "backing.img")
	if err := os.WriteFile(backing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, 600<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", backing).Output()
	if err != nil {
		t.Fatalf("cannot attach a loop device (the tests need loop devices): %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v: %s", dev, err, out)
		}
	})
	r, err := disk.Provision(context.Background(), res.Image, dev, trust, disk.Options{NodeID: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Device || r.Layout.Size != 600<<20 {
		t.Fatalf("device result %+v", r)
	}
	if fi, err := os.Stat(dev); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("%s is no longer a block device: %v", dev, err)
	}
	tbl := readGPT(t, backing)
	if len(tbl.Partitions) != 4 || !strings.EqualFold(tbl.Partitions[1].GUID, disk.GUID(res.Digest, "dev", "rootA")) {
		t.Fatalf("GPT on the device: %+v", tbl.Partitions)
	}
	if got := mountedDigest(t, dev, r.Layout.Part(disk.PartRootA)); got != res.ManifestData.TreeDigest {
		t.Fatalf("root A tree digest %s, manifest says %s", got, res.ManifestData.TreeDigest)
	}
	run(t, "fsck.vfat", "-n", extract(t, backing, r.Layout.Part(disk.PartESP)))
	state := extract(t, backing, r.Layout.Part(disk.PartState))
	run(t, "e2fsck", "-fn", state)
	if l := run(t, "debugfs", "-R", "cat /"+manifests.LedgerPath, state); !strings.Contains(l, res.Digest) {
		t.Fatalf("ledger on the device's state partition:\n%s", l)
	}
}
