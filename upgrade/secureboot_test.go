package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/upgrade"
)

// A disk provisioned for Secure Boot is upgraded offline with its db
// key: root B's unified kernel image, built for root B with the new
// image's root hash and the node's command line, signed with the key,
// goes to /EFI/Linux under its counted name beside root A's, and a
// cancel takes it back. Without the key, or with a key on a disk that
// boots plain loader entries, the upgrade is refused and the disk keeps
// every byte.
func TestUpgradeDiskSecureBoot(t *testing.T) {
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub})
	ctx := context.Background()
	keys := t.TempDir()
	signer := loadSigner(t, keys, "db")
	other := loadSigner(t, keys, "other")
	e := newEnvWith(t, disk.Options{Hostname: "up1", SecureBoot: signer})
	next := e.build(t, "up", "1.1.0", "2", e.key)

	before := e.sum(t)
	if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next}); !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "strata secure-boot sign-image") {
		t.Fatalf("upgrade without the db key: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the refused upgrade changed the disk")
	}

	// Another db key than the one root A's kernel image was signed with:
	// the firmware may not trust it.
	_, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, SecureBoot: other})
	if !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "from /EFI/Linux/strata-1-a.efi, which the certificate given (CN=strata test other) did not sign") || !strings.Contains(err.Error(), "--secure-boot-rotate") {
		t.Fatalf("upgrade with another db key: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the upgrade refused for its key changed the disk")
	}

	rep, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, SecureBoot: signer})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entry == nil || rep.Entry.File != "strata-2-b+3.efi" || rep.Entry.UKI != "/EFI/Linux/strata-2-b+3.efi" || rep.Entry.ID != "strata-2-b.efi" {
		t.Fatalf("entry %+v", rep.Entry)
	}
	if ukis := e.esp(t, "/EFI/Linux"); !strings.Contains(ukis, "strata-1-a.efi") || !strings.Contains(ukis, "strata-2-b+3.efi") || strings.Contains(ukis, ".new") {
		t.Fatalf("/EFI/Linux:\n%s", ukis)
	}
	if entries := e.esp(t, "/loader/entries"); strings.Contains(entries, "strata-") {
		t.Fatalf("plain loader entries on a Secure Boot disk:\n%s", entries)
	}
	img := filepath.Join(t.TempDir(), "b.efi")
	if err := os.WriteFile(img, []byte(e.espRead(t, rep.Entry.UKI)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := signer.Verify(ctx, img); err != nil {
		t.Fatalf("root B's kernel image: %v", err)
	}
	if err := other.Verify(ctx, img); !errors.Is(err, secureboot.ErrSignature) {
		t.Fatalf("root B's kernel image verifies against another certificate: %v", err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	info, err := uki.ReadInfo(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := "root=/dev/mapper/strata-root strata.root=PARTUUID=" + strings.ToLower(e.layout.Part(disk.PartRootB).GUID) +
		" strata.verity=" + verityOf(t, next).RootHash + " ro rootfstype=squashfs console=tty0 console=ttyS0,115200 systemd.hostname=up1 panic=10"
	if info.Cmdline != want || !info.Signed {
		t.Fatalf("root B's command line\n%s\nwant\n%s", info.Cmdline, want)
	}
	var u manifests.StagedUpgrade
	if staged := e.state(t, manifests.UpgradePath); manifests.Decode([]byte(staged), &u) != nil || u.Entry != "strata-2-b.efi" {
		t.Fatalf("staged upgrade: %s", staged)
	}

	// Cancelled: root B's kernel image goes, root A's stays.
	if _, err := upgrade.CancelDisk(ctx, e.disk, 0); err != nil {
		t.Fatal(err)
	}
	if ukis := e.esp(t, "/EFI/Linux"); strings.Contains(ukis, "strata-2-b") || !strings.Contains(ukis, "strata-1-a.efi") {
		t.Fatalf("/EFI/Linux after cancel:\n%s", ukis)
	}

	// A db key rotation: the firmware's db holds both certificates, and
	// the new root's image is signed with the new key.
	rep, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, SecureBoot: other, RotateSecureBoot: true})
	if err != nil {
		t.Fatalf("upgrade with a rotated db key: %v", err)
	}
	if err := os.WriteFile(img, []byte(e.espRead(t, rep.Entry.UKI)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(ctx, img); err != nil {
		t.Fatalf("root B's kernel image after a rotation: %v", err)
	}
}

// A db key given for a disk that boots plain loader entries is refused:
// a signed kernel image beside them would not make it boot under Secure
// Boot.
func TestUpgradeDiskSecureBootPlainDisk(t *testing.T) {
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub})
	e := newEnv(t)
	next := e.build(t, "up", "1.1.0", "2", e.key)
	before := e.sum(t)
	_, err := upgrade.Disk(context.Background(), e.disk, upgrade.Options{Image: next, SecureBoot: loadSigner(t, t.TempDir(), "db")})
	if !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "a plain loader entry") {
		t.Fatalf("a db key for a plain disk: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the refused upgrade changed the disk")
	}
}

func loadSigner(t *testing.T, dir, name string) *secureboot.Signer {
	t.Helper()
	k, c := testenv.SecureBootKey(t, dir, name)
	s, err := secureboot.LoadSigner(k, c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A disk provisioned for Secure Boot is upgraded without the db key with
// the new image's boot image, signed for any node of the line: given
// with the image, or published with it in the repository and fetched by
// --repo. Root B's entry is the boot image byte for byte, listed for
// slot B though its command line names no partition. A boot image of
// another image, one changed in the repository, one signed by another
// key than the running kernel image (unless a rotation says so), or a
// repository that publishes the image without one, is refused with the
// disk unchanged.
func TestUpgradeDiskBootImage(t *testing.T) {
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub})
	ctx := context.Background()
	signer := loadSigner(t, t.TempDir(), "db")
	e := newEnvWith(t, disk.Options{Hostname: "up1", SecureBoot: signer})
	next := e.build(t, "up", "1.1.0", "2", e.key)
	later := e.build(t, "up", "1.2.0", "3", e.key)
	boot, err := disk.SignImage(ctx, next, "", nil, signer, "")
	if err != nil {
		t.Fatal(err)
	}
	laterBoot, err := disk.SignImage(ctx, later, "", nil, signer, "")
	if err != nil {
		t.Fatal(err)
	}

	before := e.sum(t)
	for _, dry := range []bool{true, false} {
		_, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, BootImage: laterBoot.File, DryRun: dry})
		if !errors.Is(err, manifests.ErrBootImage) || !strings.Contains(err.Error(), "not the one a boot image of root hash "+boot.RootHash+" has") {
			t.Fatalf("the boot image of another image (dry run %v): %v", dry, err)
		}
	}
	if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, BootImage: boot.File, DryRun: true}); err != nil {
		t.Fatalf("a dry run with the boot image: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the refused boot image changed the disk")
	}

	rep, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, BootImage: boot.File})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entry == nil || rep.Entry.UKI != "/EFI/Linux/strata-2-b+3.efi" || rep.Entry.Slot != manifests.SlotB || rep.Entry.Options != manifests.BootImageCmdline(boot.RootHash) {
		t.Fatalf("entry %+v", rep.Entry)
	}
	if e.espRead(t, rep.Entry.UKI) != readFile(t, boot.File) {
		t.Fatal("root B's kernel image is not the boot image")
	}
	// Listed for slot B; cancelled, it goes.
	if _, err := upgrade.CancelDisk(ctx, e.disk, 0); err != nil {
		t.Fatal(err)
	}
	if ukis := e.esp(t, "/EFI/Linux"); strings.Contains(ukis, "strata-2-b") || !strings.Contains(ukis, "strata-1-a.efi") {
		t.Fatalf("/EFI/Linux after cancel:\n%s", ukis)
	}

	// From the repository: 1.1.0 published with its boot image is taken
	// with it; 1.2.0 published without one is refused.
	if _, err := repo.AddImageBoot(ctx, e.repo, next, laterBoot.File, e.key); !errors.Is(err, manifests.ErrBootImage) {
		t.Fatalf("publishing 1.1.0 with 1.2.0's boot image: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.repo, "images", "up-1.1.0*")); len(left) > 0 {
		t.Fatalf("the refused publication left %v", left)
	}
	own, err := disk.SignImage(ctx, e.image, filepath.Join(t.TempDir(), "own.efi"), nil, signer, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.AddImageBoot(ctx, e.repo, e.image, own.File, e.key); !errors.Is(err, repo.ErrExists) || !strings.Contains(err.Error(), "the line's own image") {
		t.Fatalf("a boot image for the line's own image: %v", err)
	}
	ref, err := repo.AddImageBoot(ctx, e.repo, next, boot.File, e.key)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Boot == nil || ref.Boot.File != "images/up-1.1.0."+boot.SHA256[:16]+".efi" || ref.Boot.SHA256 != boot.SHA256 || ref.Boot.Size != boot.Size {
		t.Fatalf("published boot image %+v, signed %+v", ref.Boot, boot)
	}
	if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Repo: e.repo, DryRun: true}); err != nil {
		t.Fatalf("upgrade --repo --dry-run: %v", err)
	}
	rep, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Repo: e.repo})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entry == nil || e.espRead(t, rep.Entry.UKI) != readFile(t, boot.File) {
		t.Fatalf("upgrade --repo: entry %+v is not the published boot image", rep.Entry)
	}
	if _, err := upgrade.CancelDisk(ctx, e.disk, 0); err != nil {
		t.Fatal(err)
	}
	if a, err := overlay.VerifyRepo(ctx, e.repo, nil); err != nil || !a.OK() {
		t.Fatalf("verify-sequence --repo with a boot image: %v %+v", err, a)
	}

	// A boot image changed in the repository: the audit names it, and
	// the upgrade refuses it before the disk changes.
	published := filepath.Join(e.repo, ref.Boot.File)
	good := []byte(readFile(t, published))
	bad := append([]byte(nil), good...)
	bad[len(bad)-10] ^= 1
	if err := os.WriteFile(published, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := overlay.VerifyRepo(ctx, e.repo, nil); err != nil || a.OK() || !strings.Contains(fmt.Sprint(a.Findings), "boot image "+ref.Boot.File+" of upgrade image 1.1.0 has sha256") {
		t.Fatalf("verify-sequence --repo with a changed boot image: %v %+v", err, a)
	}
	before = e.sum(t)
	for _, dry := range []bool{true, false} {
		if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Repo: e.repo, DryRun: dry}); !errors.Is(err, repo.ErrTampered) {
			t.Fatalf("upgrade --repo (dry run %v) with a changed boot image: %v", dry, err)
		}
	}
	if e.sum(t) != before {
		t.Fatal("the refused boot image changed the disk")
	}
	if err := os.WriteFile(published, good, 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := repo.AddImage(ctx, e.repo, later, e.key); err != nil {
		t.Fatal(err)
	}
	before = e.sum(t)
	for _, dry := range []bool{true, false} {
		_, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Repo: e.repo, DryRun: dry})
		if !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "publishes image 1.2.0 without its boot image") {
			t.Fatalf("upgrade --repo (dry run %v) to an image published without a boot image: %v", dry, err)
		}
	}
	if e.sum(t) != before {
		t.Fatal("the refused upgrade changed the disk")
	}

	// 1.2.0's boot image published afterwards; 1.1.0's replaced (a db key
	// rotation re-signs them): the index names the new file, the old one
	// goes, nothing else changes.
	if ref, err = repo.AddImageBoot(ctx, e.repo, later, laterBoot.File, e.key); err != nil || ref.Boot == nil || ref.Boot.SHA256 != laterBoot.SHA256 {
		t.Fatalf("publishing 1.2.0's boot image afterwards: %+v, %v", ref, err)
	}
	rotated, err := disk.SignImage(ctx, next, filepath.Join(t.TempDir(), "rotated.efi"), nil, loadSigner(t, t.TempDir(), "db2"), "")
	if err != nil {
		t.Fatal(err)
	}
	// Signed by a key the running kernel image's signer is not: refused,
	// unless a db key rotation says the firmware trusts both.
	before = e.sum(t)
	_, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, BootImage: rotated.File})
	if !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "is signed by CN=strata test db2") || !strings.Contains(err.Error(), "--secure-boot-rotate") {
		t.Fatalf("a boot image signed by another key: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the boot image refused for its signer changed the disk")
	}
	if _, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, BootImage: rotated.File, RotateSecureBoot: true}); err != nil {
		t.Fatalf("a boot image signed by the rotated key: %v", err)
	}
	if _, err := upgrade.CancelDisk(ctx, e.disk, 0); err != nil {
		t.Fatal(err)
	}
	oldFile := filepath.Join(e.repo, "images/up-1.1.0."+boot.SHA256[:16]+".efi")
	if ref, err = repo.AddImageBoot(ctx, e.repo, next, rotated.File, e.key); err != nil || ref.Boot == nil || ref.Boot.SHA256 != rotated.SHA256 || ref.Version != "1.1.0" {
		t.Fatalf("replacing 1.1.0's boot image: %+v, %v", ref, err)
	}
	if _, err := os.Stat(oldFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replaced boot image %s is still there: %v", oldFile, err)
	}
	if a, err := overlay.VerifyRepo(ctx, e.repo, nil); err != nil || !a.OK() {
		t.Fatalf("verify-sequence --repo after the boot images changed: %v %+v", err, a)
	}
	rep, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Repo: e.repo})
	if err != nil || rep.Entry == nil || e.espRead(t, rep.Entry.UKI) != readFile(t, laterBoot.File) {
		t.Fatalf("upgrade --repo to 1.2.0 with its boot image: %+v, %v", rep, err)
	}
}

// A boot image given for a disk that boots plain loader entries is
// refused.
func TestUpgradeDiskBootImagePlainDisk(t *testing.T) {
	testenv.RequireTools(t, []string{"cpio", "sbsign", "sbverify", disk.DefaultStub})
	e := newEnv(t)
	next := e.build(t, "up", "1.1.0", "2", e.key)
	boot, err := disk.SignImage(context.Background(), next, "", nil, loadSigner(t, t.TempDir(), "db"), "")
	if err != nil {
		t.Fatal(err)
	}
	before := e.sum(t)
	_, err = upgrade.Disk(context.Background(), e.disk, upgrade.Options{Image: next, BootImage: boot.File})
	if !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "a boot image beside it would not make the disk boot under Secure Boot") {
		t.Fatalf("a boot image for a plain disk: %v", err)
	}
	if e.sum(t) != before {
		t.Fatal("the refused upgrade changed the disk")
	}
}
