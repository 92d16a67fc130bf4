package upgrade_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
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
	if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next}); !errors.Is(err, disk.ErrSecureBoot) || !strings.Contains(err.Error(), "keeps that key off nodes") {
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
