package disk_test

import (
	"context"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/efivars"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
)

// TestSignImage signs the boot image of an image: beside it, signed with
// the db key, with the command line for any node (strata.root=auto, the
// root hash, no host); CheckBootImage accepts it for that root hash
// only, and refuses it unsigned. An image whose root cannot be opened
// verified gets no boot image, and nothing is written.
func TestSignImage(t *testing.T) {
	requireDiskTools(t)
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", "sbattach", disk.DefaultStub})
	ctx := context.Background()
	dir := t.TempDir()
	res, trust := bootableImage(t, dir, false)
	signer := sbSigner(t, dir, "db")
	b, err := disk.SignImage(ctx, res.Image, "", trust, signer, "")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSuffix(res.Image, ".squashfs") + ".efi"
	if b.File != want || b.RootHash != res.Verity.RootHash || b.Kernel != "boot/vmlinuz-6.1.0-1" {
		t.Fatalf("boot image %+v; want %s booting root hash %s", b, want, res.Verity.RootHash)
	}
	if err := signer.Verify(ctx, b.File); err != nil {
		t.Fatalf("the boot image does not verify against the db certificate: %v", err)
	}
	f, err := os.Open(b.File)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	info, err := uki.ReadInfo(f, fi.Size())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if info.Cmdline != manifests.BootImageCmdline(res.Verity.RootHash) || b.Cmdline != info.Cmdline {
		t.Errorf("command line %q, reported %q; want %q", info.Cmdline, b.Cmdline, manifests.BootImageCmdline(res.Verity.RootHash))
	}
	if _, err := uki.CheckBootImage(b.File, res.Verity.RootHash); err != nil {
		t.Errorf("CheckBootImage: %v", err)
	}
	if _, err := uki.CheckBootImage(b.File, strings.Repeat("0", 64)); !errors.Is(err, manifests.ErrBootImage) {
		t.Errorf("CheckBootImage for another root hash: %v, want ErrBootImage", err)
	}

	// The same UKI unsigned is refused.
	unsigned := filepath.Join(dir, "unsigned.efi")
	must(t, os.WriteFile(unsigned, []byte(espReadUnsigned(t, b.File)), 0o644))
	if _, err := uki.CheckBootImage(unsigned, res.Verity.RootHash); !errors.Is(err, manifests.ErrBootImage) || !strings.Contains(err.Error(), "not signed") {
		t.Errorf("CheckBootImage of an unsigned image: %v", err)
	}
	if _, err := uki.CheckBootImage(filepath.Join(dir), res.Verity.RootHash); !errors.Is(err, manifests.ErrBootImage) {
		t.Errorf("CheckBootImage of a directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.efi")
	must(t, syscall.Mkfifo(fifo, 0o644))
	if _, err := uki.CheckBootImage(fifo, res.Verity.RootHash); !errors.Is(err, manifests.ErrBootImage) {
		t.Errorf("CheckBootImage of a FIFO: %v", err)
	}

	// What the machine's firmware variables say of it (a node upgrading
	// itself): its db holds the signer's certificate, or not; its dbx
	// revokes it; Secure Boot is off.
	other := sbSigner(t, dir, "other")
	for _, c := range []struct {
		name       string
		secureBoot bool
		db, dbx    []*x509.Certificate
		want       string // "" when accepted
	}{
		{"db holds the signer", true, []*x509.Certificate{other.Certificate(), signer.Certificate()}, nil, ""},
		{"db holds another certificate", true, []*x509.Certificate{other.Certificate()}, nil, "which this machine's firmware does not trust: its db"},
		{"db holds no certificate", true, []*x509.Certificate{}, nil, "-*) holds no certificate;"},
		{"dbx revokes the signer", true, []*x509.Certificate{signer.Certificate()}, []*x509.Certificate{signer.Certificate()}, "revokes in its dbx"},
		{"Secure Boot off", false, []*x509.Certificate{other.Certificate()}, nil, ""},
	} {
		vars := efiVars(t, c.secureBoot, c.db, c.dbx)
		err := disk.CheckFirmwareTrusts(vars, "fleet.efi", b.File, "b")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (!errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "root B")):
			t.Errorf("%s: %v, want ErrSecureBoot saying %q", c.name, err, c.want)
		}
	}
	if err := disk.CheckFirmwareTrusts(filepath.Join(dir, "no-efivars"), "fleet.efi", b.File, "b"); err != nil {
		t.Errorf("a machine without EFI variables: %v", err)
	}

	// No strata in the image: no verified root, no boot image.
	dir2 := t.TempDir()
	res2, trust2 := bootableImage(t, dir2, true)
	out := filepath.Join(dir2, "x.efi")
	if _, err := disk.SignImage(ctx, res2.Image, out, trust2, signer, ""); !errors.Is(err, disk.ErrSecureBoot) {
		t.Fatalf("an image with no verified root: %v, want ErrSecureBoot", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused boot image left %s: %v", out, err)
	}
	if _, err := os.Stat(repo.BootImagePath(res2.Image)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused boot image was written beside the image: %v", err)
	}
}

// espReadUnsigned returns the UKI at p with its certificate table cut
// off (sbattach --remove would do the same).
func espReadUnsigned(t *testing.T, p string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "u.efi")
	raw := readFile(t, p)
	must(t, os.WriteFile(out, raw, 0o644))
	if b, err := exec.Command("sbattach", "--remove", out).CombinedOutput(); err != nil {
		t.Fatalf("sbattach --remove: %v\n%s", err, b)
	}
	return string(readFile(t, out))
}

// TestProvisionFromBootImage provisions a Secure Boot disk on a host
// without the db key, from the image's boot image and systemd-boot
// signed where the key is: the ESP holds exactly those two files, and
// no plain kernel or entry. A boot loader signed by another key than the
// boot image, or a boot image of another image, is refused and no disk
// is written.
func TestProvisionFromBootImage(t *testing.T) {
	requireDiskTools(t)
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub, disk.DefaultBootEFI})
	ctx := context.Background()
	dir := t.TempDir()
	res, trust := bootableImage(t, dir, false)
	signer := sbSigner(t, dir, "db")
	other := sbSigner(t, dir, "other")
	boot, err := disk.SignImage(ctx, res.Image, "", trust, signer, "")
	if err != nil {
		t.Fatal(err)
	}
	loader, otherLoader := filepath.Join(dir, "loader.efi"), filepath.Join(dir, "other-loader.efi")
	if err := disk.SignLoader(ctx, "", loader, signer); err != nil {
		t.Fatal(err)
	}
	if err := disk.SignLoader(ctx, "", otherLoader, other); err != nil {
		t.Fatal(err)
	}
	if err := signer.Verify(ctx, loader); err != nil {
		t.Fatalf("the signed boot loader: %v", err)
	}

	d := filepath.Join(dir, "disk.img")
	if _, err := disk.Provision(ctx, res.Image, d, trust, disk.Options{Size: 512 << 20, NodeID: "sb", BootImage: boot.File, SignedLoader: otherLoader}); !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "CN=strata test other") {
		t.Fatalf("a boot loader signed by another key: %v", err)
	}
	dir2 := t.TempDir()
	res2, trust2 := bootableImage(t, dir2, false)
	if _, err := disk.Provision(ctx, res2.Image, d, trust2, disk.Options{Size: 512 << 20, NodeID: "sb", BootImage: boot.File, SignedLoader: loader}); !errors.Is(err, manifests.ErrBootImage) {
		t.Fatalf("the boot image of another image: %v", err)
	}
	if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused provisioning left %s: %v", d, err)
	}

	r, err := disk.Provision(ctx, res.Image, d, trust, disk.Options{Size: 512 << 20, NodeID: "sb", Hostname: "sb1", BootImage: boot.File, SignedLoader: loader})
	if err != nil {
		t.Fatal(err)
	}
	if r.UKI != "/EFI/Linux/strata-1-a.efi" || r.RootHash != res.Verity.RootHash {
		t.Fatalf("result: UKI %q, root hash %q", r.UKI, r.RootHash)
	}
	if espRead(t, d, r.UKI) != string(readFile(t, boot.File)) {
		t.Error("the disk's kernel image is not the boot image")
	}
	for _, p := range []string{"/EFI/BOOT/BOOTX64.EFI", "/EFI/systemd/systemd-bootx64.efi"} {
		if espRead(t, d, p) != string(readFile(t, loader)) {
			t.Errorf("%s is not the signed boot loader", p)
		}
	}
	if got := espRead(t, d, "/loader/loader.conf"); got != "default strata-*\ntimeout 3\neditor no\n" {
		t.Errorf("loader.conf:\n%s", got)
	}
	espAbsent(t, d, "/loader/entries/strata-1-a.conf", "/strata/a/vmlinuz")
}

// efiVars writes an efivarfs-like directory: SecureBoot, and db and dbx
// holding the certificates given (one EFI_SIGNATURE_LIST each, after
// the 4 attribute bytes efivarfs puts first).
func efiVars(t *testing.T, secureBoot bool, db, dbx []*x509.Certificate) string {
	t.Helper()
	dir := t.TempDir()
	sb := byte(0)
	if secureBoot {
		sb = 1
	}
	attrs := []byte{6, 0, 0, 0}
	must(t, os.WriteFile(filepath.Join(dir, "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"), append(attrs, sb), 0o644))
	x509Type, err := efivars.ParseGUID("a5c059a1-94e4-4aa7-87b5-ab155c2bf072")
	must(t, err)
	for name, certs := range map[string][]*x509.Certificate{"db": db, "dbx": dbx} {
		if certs == nil {
			continue
		}
		data := append([]byte{}, attrs...)
		for _, c := range certs {
			l := make([]byte, 28+16)
			copy(l, x509Type[:])
			binary.LittleEndian.PutUint32(l[16:], uint32(len(l)+len(c.Raw)))
			binary.LittleEndian.PutUint32(l[24:], uint32(16+len(c.Raw)))
			data = append(data, append(l, c.Raw...)...)
		}
		must(t, os.WriteFile(filepath.Join(dir, name+"-d719b2cb-3d3a-4596-a3bc-dad00e67656f"), data, 0o644))
	}
	return dir
}
