package disk_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
)

// TestProvisionDiskKernel provisions an image with two kernels: the newer
// one, its initrd and a loader entry for root A land on the ESP.
func TestProvisionDiskKernel(t *testing.T) {
	requireDiskTools(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	recipe := `line: kern
version: 1.0.0
epoch: 1767225600
base:
  dir: rootfs
files:
  - path: /boot/vmlinuz-6.1.0-9
    content: "old kernel\n"
  - path: /boot/initrd.img-6.1.0-9
    content: "old initrd\n"
  - path: /boot/vmlinuz-6.1.0-10
    content: "new kernel\n"
  - path: /boot/initrd.img-6.1.0-10
    content: "new initrd\n"
`
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	key := testKey(t)
	res, err := builder.Build(context.Background(), filepath.Join(dir, "recipe.yaml"), filepath.Join(dir, "out"), builder.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := key.PublicKeySet()
	d := filepath.Join(dir, "nodes", "edge", "disk.img") // parents made as needed
	r, err := disk.Provision(context.Background(), res.Image, d, trust, disk.Options{Size: 512 << 20, NodeID: "k", Hostname: "edge-7.example"})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted as strings, "6.1.0-9" > "6.1.0-10": versions compare as versions.
	if !r.BootEntry || r.Kernel != "boot/vmlinuz-6.1.0-10" || r.Initrd != "boot/initrd.img-6.1.0-10" {
		t.Fatalf("boot files %+v", r)
	}
	run(t, "fsck.vfat", "-n", extract(t, d, r.Layout.Part(disk.PartESP)))
	entry := espRead(t, d, "/loader/entries/strata-1-a.conf")
	if !strings.Contains(entry, "root=PARTUUID="+strings.ToLower(r.Layout.Part(disk.PartRootA).GUID)+" ro rootfstype=squashfs") ||
		!strings.Contains(entry, " console=ttyS0,115200") || !strings.Contains(entry, " systemd.hostname=edge-7.example\n") {
		t.Fatalf("loader entry:\n%s", entry)
	}
	// A host name that could smuggle kernel arguments is refused.
	for _, bad := range []string{"a b", "x init=/bin/sh", "-lead", "trail-", "a..b"} {
		if _, err := disk.Provision(context.Background(), res.Image, filepath.Join(dir, "bad.img"), trust, disk.Options{Size: 512 << 20, Hostname: bad}); err == nil {
			t.Errorf("hostname %q accepted", bad)
		}
	}
	if k, i := espRead(t, d, "/strata/a/vmlinuz"), espRead(t, d, "/strata/a/initrd.img"); k != "new kernel\n" || i != "new initrd\n" {
		t.Fatalf("ESP kernel %q initrd %q", k, i)
	}
	if l := espRead(t, d, "/loader/loader.conf"); !strings.Contains(l, "default strata-*") {
		t.Fatalf("loader.conf:\n%s", l)
	}
}

func espRead(t *testing.T, p, name string) string {
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
	f, err := fs.OpenFile(name, os.O_RDONLY)
	if err != nil {
		t.Fatalf("ESP %s: %v", name, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("ESP %s: %v", name, err)
	}
	return string(b)
}
