package disk_test

import (
	"bytes"
	"context"
	"debug/pe"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/internal/uki"
)

// bootableImage builds an image with a kernel, an initrd and (unless
// noStrata) a stand-in strata binary, so that it has a verity initrd;
// without strata its root cannot be opened verified.
func bootableImage(t *testing.T, dir string, noStrata bool) (*builder.Result, *sign.KeySet) {
	t.Helper()
	recipe := "line: sb\nversion: 1.0.0\nepoch: 1767225600\nbase:\n  dir: rootfs\nfiles:\n" +
		"  - path: /boot/initrd.img-6.1.0-1\n    content: \"initrd\\n\"\n"
	if !noStrata {
		recipe += "strata: {}\n"
	}
	for _, sub := range []string{"etc", "var", "run"} {
		must(t, os.MkdirAll(filepath.Join(dir, "rootfs", sub), 0o755))
	}
	// A kernel larger than the head of a UKI readEntries reads, so that
	// reading the command line back stops early.
	must(t, os.MkdirAll(filepath.Join(dir, "rootfs/boot"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "rootfs/boot/vmlinuz-6.1.0-1"), fakeKernel(), 0o644))
	bin := filepath.Join(dir, "strata-stand-in")
	must(t, os.WriteFile(bin, []byte("#!/bin/sh\necho stand-in\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipe), 0o644))
	key := testKey(t)
	opts := []builder.Option{builder.WithKey(key)}
	if !noStrata {
		opts = append(opts, builder.WithStrataBinary(bin))
	}
	res, err := builder.Build(context.Background(), filepath.Join(dir, "recipe.yaml"), filepath.Join(dir, "out"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := key.PublicKeySet()
	return res, trust
}

// fakeKernel is 3 MiB of deterministic bytes that do not compress.
func fakeKernel() []byte {
	b := make([]byte, 3<<20)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// TestProvisionSecureBoot provisions a disk signed for Secure Boot: the
// ESP holds systemd-boot and one UKI, both signed with the db key (and
// verifying against its certificate only), and no unsigned kernel or
// loader entry; the UKI carries the kernel, the verity initrd followed
// by the image's, and the command line with the root hash. The disk's
// entries list the UKI, and an upgrade (which would need the db key) is
// refused without a byte of the disk changing.
func TestProvisionSecureBoot(t *testing.T) {
	requireDiskTools(t)
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub})
	ctx := context.Background()
	dir := t.TempDir()
	res, trust := bootableImage(t, dir, false)
	signer := sbSigner(t, dir, "db")
	other := sbSigner(t, dir, "other")
	d := filepath.Join(dir, "disk.img")
	r, err := disk.Provision(ctx, res.Image, d, trust, disk.Options{Size: 512 << 20, NodeID: "sb", Hostname: "sb1", SecureBoot: signer})
	if err != nil {
		t.Fatal(err)
	}
	if r.UKI != "/EFI/Linux/strata-1-a.efi" || r.RootHash != res.Verity.RootHash {
		t.Fatalf("result: UKI %q, root hash %q", r.UKI, r.RootHash)
	}
	if got := espRead(t, d, "/loader/loader.conf"); got != "default strata-*\ntimeout 3\neditor no\n" {
		t.Errorf("loader.conf:\n%s", got)
	}
	espFiles(t, d, "/EFI/BOOT/BOOTX64.EFI", "/EFI/systemd/systemd-bootx64.efi", r.UKI)
	espAbsent(t, d, "/loader/entries/strata-1-a.conf", "/strata/a/vmlinuz")

	check := func(name string) []byte {
		t.Helper()
		p := filepath.Join(t.TempDir(), filepath.Base(name))
		must(t, os.WriteFile(p, []byte(espRead(t, d, name)), 0o644))
		if err := signer.Verify(ctx, p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := other.Verify(ctx, p); !errors.Is(err, secureboot.ErrSignature) {
			t.Errorf("%s verifies against another certificate: %v", name, err)
		}
		return readFile(t, p)
	}
	check("/EFI/BOOT/BOOTX64.EFI")
	img := check(r.UKI)

	f, err := pe.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	section := func(name string) string {
		s := f.Section(name)
		if s == nil {
			t.Fatalf("the UKI has no %s", name)
		}
		b := make([]byte, s.VirtualSize)
		if _, err := s.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	wantCmdline := "root=/dev/mapper/strata-root strata.root=PARTUUID=" + strings.ToLower(r.Layout.Part(disk.PartRootA).GUID) +
		" strata.verity=" + res.Verity.RootHash + " ro rootfstype=squashfs console=tty0 console=ttyS0,115200 systemd.hostname=sb1"
	if got := section(uki.SectionCmdline); got != wantCmdline {
		t.Errorf(".cmdline\n%s\nwant\n%s", got, wantCmdline)
	}
	if got := section(uki.SectionLinux); got != string(fakeKernel()) {
		t.Errorf(".linux is not the image's kernel (%d bytes)", len(got))
	}
	initrd := section(uki.SectionInitrd)
	if !strings.HasSuffix(initrd, "initrd\n") || !strings.Contains(initrd, "strata/verity.json") {
		t.Errorf(".initrd is not the verity initrd then the image's (%d bytes)", len(initrd))
	}
	if got := section(uki.SectionOSRel); !strings.Contains(got, "ID=strata\nVERSION_ID=1\n") || !strings.Contains(got, `PRETTY_NAME="strata sb 1.0.0"`) {
		t.Errorf(".osrel:\n%s", got)
	}

	// The node's entries are the UKI; an upgrade is refused before it
	// writes anything.
	before, _, err := tree.HashFileContext(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	n, err := disk.MountNodeReadOnly(ctx, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	target, err := n.Target(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	es, err := target.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].UKI != r.UKI || es[0].Slot != "a" || es[0].ID != "strata-1-a.efi" || es[0].Options != wantCmdline || es[0].Title != "strata sb 1.0.0" {
		t.Fatalf("entries: %+v", es)
	}
	if _, err := target.Install(ctx, res.Image, nil, 3, nil); !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "strata secure-boot sign-image") {
		t.Fatalf("Install on a Secure Boot disk: %v", err)
	}
	must(t, target.Close())
	must(t, n.Close())
	if after, _, _ := tree.HashFileContext(ctx, d); after != before {
		t.Fatal("the refused upgrade changed the disk")
	}
}

// TestProvisionSecureBootRefusals: an image whose root would boot
// unverified, or a stub that is not one, is refused before the disk file
// exists.
func TestProvisionSecureBootRefusals(t *testing.T) {
	requireDiskTools(t)
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub})
	ctx := context.Background()
	dir := t.TempDir()
	signer := sbSigner(t, dir, "db")
	unverified, trust := bootableImage(t, filepath.Join(dir, "plain"), true)
	d := filepath.Join(dir, "disk.img")
	_, err := disk.Provision(ctx, unverified.Image, d, trust, disk.Options{Size: 512 << 20, SecureBoot: signer})
	if !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "no verity record") {
		t.Errorf("an image without strata: %v", err)
	}
	verified, trust := bootableImage(t, filepath.Join(dir, "verified"), false)
	notStub := filepath.Join(dir, "stub.efi")
	must(t, os.WriteFile(notStub, []byte("MZ"), 0o644))
	_, err = disk.Provision(ctx, verified.Image, d, trust, disk.Options{Size: 512 << 20, SecureBoot: signer, Stub: notStub})
	if !errors.Is(err, uki.ErrNotStub) {
		t.Errorf("a stub that is not one: %v", err)
	}
	if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused provision left %s: %v", d, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), "disk.img") {
			t.Errorf("a refused provision left %s", e.Name())
		}
	}
}

// espAbsent fails if any of names is on the disk's ESP.
func espAbsent(t *testing.T, p string, names ...string) {
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
		if _, err := fs.OpenFile(n, os.O_RDONLY); err == nil {
			t.Errorf("ESP %s is there", n)
		}
	}
}
