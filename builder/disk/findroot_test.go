package disk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/internal/verity"
)

// rootFixture is a fake machine for FindRoot: sysfs and /dev below one
// directory, partitions as regular files, and a verity initrd directory
// with a signed record of an image.
type rootFixture struct {
	t                *testing.T
	sys, dev, initrd string
	image            []byte // the image with its tree appended
	rootHash         string
	hashOffset       int64
}

func newRootFixture(t *testing.T) *rootFixture {
	t.Helper()
	dir := t.TempDir()
	f := &rootFixture{t: t, sys: filepath.Join(dir, "sys"), dev: filepath.Join(dir, "dev"), initrd: filepath.Join(dir, "strata")}
	img := filepath.Join(dir, "image")
	data := bytes.Repeat([]byte("strata root "), 200*verity.BlockSize/12) // 200 blocks: two levels
	if err := os.WriteFile(img, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := verity.Append(context.Background(), fh, []byte("salt"))
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	f.image, _ = os.ReadFile(img)
	f.rootHash, f.hashOffset = tr.RootHex(), tr.Params.HashOffset
	key := testenv.Key(t)
	rec := verity.Record("fr", "1.0.0", "sha256:"+strings.Repeat("ab", 32), tr)
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string][]byte{
		"verity.json":               raw,
		"verity.json.minisig":       key.Sign(raw, sign.VerityComment("fr", "1.0.0")),
		"keys/" + key.ID() + ".pub": key.PublicText(),
	} {
		f.write(filepath.Join(f.initrd, p), b)
	}
	for _, d := range []string{"class/block", "firmware/efi/efivars"} {
		if err := os.MkdirAll(filepath.Join(f.sys, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *rootFixture) write(p string, b []byte) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// part adds partition index of disk holding b, under the PARTUUID guid.
func (f *rootFixture) part(disk string, index int, guid string, b []byte) string {
	f.t.Helper()
	name := disk + string(rune('0'+index))
	dev := filepath.Join(f.sys, "devices", disk, name)
	f.write(filepath.Join(dev, "partition"), []byte{byte('0' + index), '\n'})
	if err := os.Symlink(dev, filepath.Join(f.sys, "class/block", name)); err != nil {
		f.t.Fatal(err)
	}
	f.write(filepath.Join(f.dev, name), b)
	link := filepath.Join(f.dev, "disk/by-partuuid", guid)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink("../../"+name, link); err != nil {
		f.t.Fatal(err)
	}
	return filepath.Join(f.dev, name)
}

// efiVar writes systemd-boot's variable name as efivarfs shows it.
func (f *rootFixture) efiVar(name, value string) {
	b := []byte{6, 0, 0, 0}
	for _, c := range utf16.Encode([]rune(value + "\x00")) {
		b = append(b, byte(c), byte(c>>8))
	}
	f.write(filepath.Join(f.sys, "firmware/efi/efivars", name+"-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"), b)
}

func (f *rootFixture) find() (string, error) {
	return disk.FindRoot(context.Background(), disk.FindRootOptions{RootHash: f.rootHash, Dir: f.initrd, Sys: f.sys, Dev: f.dev})
}

// TestFindRoot: a node-independent kernel image's initramfs finds the
// partition whose tree's top block matches the signed root hash, among
// an ESP, the other root (another image), a state partition and a
// partition too small for the tree; the boot loader's variables pick
// between two that match, and rule out other disks than the ESP's; a
// root hash the signed record does not name, or no match, is refused.
func TestFindRoot(t *testing.T) {
	f := newRootFixture(t)
	otherImage := bytes.Clone(f.image)
	otherImage[f.hashOffset+5] ^= 1 // another tree: another root hash
	f.part("vda", 1, "e5p", make([]byte, 4096))
	f.part("vda", 2, "aaaa", otherImage)
	want := f.part("vda", 3, "bbbb", f.image)
	f.part("vda", 4, "5747e", make([]byte, 1<<16))
	f.part("vdb", 1, "5a11", f.image[:f.hashOffset+100]) // cut in its tree
	got, err := f.find()
	if err != nil || got != want {
		t.Fatalf("FindRoot = %q, %v; want %s", got, err, want)
	}

	// The same image on a second disk: ambiguous until the boot loader
	// says which disk's ESP it booted from, and which slot.
	clone := f.part("vdc", 3, "cccc", f.image)
	if _, err := f.find(); !errors.Is(err, disk.ErrRootNotFound) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), clone) {
		t.Fatalf("two disks with the image: %v; want ErrRootNotFound naming both", err)
	}
	f.efiVar("LoaderDevicePartUUID", "E5P")
	if got, err := f.find(); err != nil || got != want {
		t.Fatalf("booted from vda's ESP: FindRoot = %q, %v; want %s", got, err, want)
	}
	sameDisk := f.part("vda", 2+3, "dddd", f.image) // a fifth partition with the image
	if _, err := f.find(); !errors.Is(err, disk.ErrRootNotFound) {
		t.Fatalf("two partitions of the ESP's disk with the image (%s, %s): %v; want ErrRootNotFound", want, sameDisk, err)
	}
	f.efiVar("LoaderEntrySelected", "strata-7-b+2-1.efi")
	if got, err := f.find(); err != nil || got != want {
		t.Fatalf("entry strata-7-b selected: FindRoot = %q, %v; want root B, %s", got, err, want)
	}

	// With the boot loader naming its ESP's disk, a match on another disk
	// is never taken, even when the boot disk has none.
	for _, p := range []string{want, sameDisk} {
		if err := os.WriteFile(p, otherImage, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := f.find(); !errors.Is(err, disk.ErrRootNotFound) {
		t.Fatalf("the image only on another disk than the ESP's: FindRoot = %q, %v; want ErrRootNotFound", got, err)
	}
	for _, p := range []string{want, sameDisk} {
		if err := os.WriteFile(p, f.image, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A root hash the signed record does not name is refused before any
	// partition is read.
	bad := *f
	bad.rootHash = strings.Repeat("0", 64)
	if _, err := bad.find(); !errors.Is(err, disk.ErrUnverifiedRoot) {
		t.Fatalf("a root hash the record does not name: %v; want ErrUnverifiedRoot", err)
	}
	// No partition holds it.
	for _, p := range []string{want, clone, sameDisk} {
		if err := os.WriteFile(p, otherImage, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.find(); !errors.Is(err, disk.ErrRootNotFound) || !strings.Contains(err.Error(), "7 partitions looked at") {
		t.Fatalf("no partition with the image: %v; want ErrRootNotFound", err)
	}
}
