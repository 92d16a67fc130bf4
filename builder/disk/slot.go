package disk

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/efivars"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
)

// ErrNoKernel reports an image that cannot boot from a root partition:
// it has no kernel and initrd.
var ErrNoKernel = manifests.Rejection("image has no kernel")

// ErrNotImage reports an image path that is not a regular file.
var ErrNotImage = manifests.Rejection("not an image file")

// Target is a node disk opened to write a whole image to its inactive
// root partition and the boot entry for it: a disk that is not running
// (from a mounted Node) or the disk of the running node (OpenLive).
type Target struct {
	Disk   string
	Layout *Layout
	// Active is the slot the node runs; the other one is written.
	Active string
	// Live is set for the running node's own disk.
	Live bool

	f     *os.File // the disk (offline), locked by the Node
	parts map[int]string
	esp   espFS
	work  string
	scr   *scratch.Dir
	done  []func() error
	// signer and stub sign the new root's UKI (SignWith); rotate lets
	// signer differ from the running UKI's signer, and signerOK records
	// that it does not.
	signer           *secureboot.Signer
	stub             string
	rotate, signerOK bool
	// bootImage is the boot image (SignImage) Install writes instead of
	// signing one (BootWith).
	bootImage string
}

// BootWith makes Install write the boot image at p (a unified kernel
// image signed for any node of the line, see SignImage) as the new
// root's kernel image, instead of signing one: how a disk that boots
// signed kernel images is upgraded without the db key, by the node
// itself. Install checks that it is signed and boots exactly the new
// image's root hash; the firmware checks its signature at the trial
// boot, and a signer it does not trust fails that boot (the node falls
// back).
//
// The boot image must claim the signer of the kernel image the node runs
// (the firmware is known to trust that one), unless rotate says the
// firmware's db holds its signer's certificate too (a db key rotation).
func (t *Target) BootWith(p string, rotate bool) { t.bootImage, t.rotate = p, rotate }

// BootsSigned reports whether the disk boots kernel images signed for
// Secure Boot (its entries are UKIs).
func (t *Target) BootsSigned() (bool, error) {
	es, err := t.Entries()
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if e.UKI != "" {
			return true, nil
		}
	}
	return false, nil
}

// SignWith makes Install sign the new root's unified kernel image with
// the db key s, on systemd's EFI stub stub ("": DefaultStub): what a
// disk provisioned for Secure Boot needs to be upgraded. The key belongs
// on the host that holds it, so this is for a disk upgraded offline
// (strata upgrade --disk), not for a node upgrading itself.
//
// The key must be the one whose certificate signed the kernel image the
// node runs: the firmware that boots that image trusts its signer, not
// necessarily another (CheckUpgradable). With rotate it may be another,
// for a db key rotation, when the machine's db already holds the new
// certificate.
func (t *Target) SignWith(s *secureboot.Signer, stub string, rotate bool) {
	t.signer, t.stub, t.rotate, t.signerOK = s, stub, rotate, false
}

// Target returns the disk of a mounted node for an upgrade; its ESP is
// reached through mtools. Close it before the node.
func (n *Node) Target(ctx context.Context) (*Target, error) {
	scr, err := scratch.MkdirTemp("upgrade")
	if err != nil {
		return nil, fmt.Errorf("upgrading %s: %w", n.Disk, err)
	}
	work := scr.Path
	t := &Target{Disk: n.Disk, Layout: n.Layout, Active: n.Slot, f: n.lock, work: work, scr: scr}
	t.esp = newMtoolsESP(ctx, n.Disk, n.Layout.Part(PartESP), work)
	return t, nil
}

// OpenLive opens the disk the running node's root (/, a squashfs on a
// root partition) is on, and mounts its ESP. It must run in a private
// mount namespace (see Reexec). The active slot is the partition / is
// mounted from.
func OpenLive(ctx context.Context) (t *Target, err error) {
	if !InPrivateNamespace() {
		return nil, fmt.Errorf("opening the node's disk: %w", ErrNotPrivate)
	}
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return nil, fmt.Errorf("opening the node's disk: %w", err)
	}
	sys, err := rootPartitionSys(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return nil, fmt.Errorf("opening the node's disk: %w", err)
	}
	idx, err := readSysInt(filepath.Join(sys, "partition"))
	if err != nil {
		return nil, fmt.Errorf("the root file system (device %d:%d) is not on a disk partition: a whole-image upgrade needs a disk node: %w", unix.Major(st.Dev), unix.Minor(st.Dev), ErrNotNodeDisk)
	}
	real, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return nil, fmt.Errorf("opening the node's disk: %w", err)
	}
	diskName := filepath.Base(filepath.Dir(real))
	diskPath := "/dev/" + diskName
	f, err := os.Open(diskPath)
	if err != nil {
		return nil, fmt.Errorf("opening the node's disk: %w", err)
	}
	defer f.Close()
	l, err := readLayout(f, diskPath)
	if err != nil {
		return nil, err
	}
	var active string
	switch idx {
	case PartRootA:
		active = manifests.SlotA
	case PartRootB:
		active = manifests.SlotB
	default:
		return nil, fmt.Errorf("the root file system is on partition %d of %s, not on root A or B: %w", idx, diskPath, ErrNotNodeDisk)
	}
	scr, err := scratch.MkdirTemp("upgrade")
	if err != nil {
		return nil, fmt.Errorf("opening the node's disk: %w", err)
	}
	work := scr.Path
	t = &Target{Disk: diskPath, Layout: l, Active: active, Live: true, work: work, scr: scr, parts: map[int]string{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	// The partitions' device nodes: /sys/block/DISK/PART/partition.
	ents, err := os.ReadDir(filepath.Join("/sys/block", diskName))
	if err != nil {
		return t, fmt.Errorf("opening the node's disk: %w", err)
	}
	for _, e := range ents {
		if i, err := readSysInt(filepath.Join("/sys/block", diskName, e.Name(), "partition")); err == nil {
			t.parts[i] = "/dev/" + e.Name()
		}
	}
	if t.parts[PartESP] == "" || t.parts[PartRootA] == "" || t.parts[PartRootB] == "" {
		return t, fmt.Errorf("the partitions of %s have no device nodes: %w", diskPath, ErrNotNodeDisk)
	}
	esp, unmount, err := mountESP(t.parts[PartESP], work)
	if err != nil {
		return t, err
	}
	t.esp = esp
	t.done = append(t.done, unmount)
	return t, nil
}

// rootPartitionSys returns the sysfs directory of the partition a root
// device is on: sys itself, or for a dm-verity root (VerityDevice) the
// one device below it.
func rootPartitionSys(sys string) (string, error) {
	if _, err := os.Stat(filepath.Join(sys, "dm")); err != nil {
		return sys, nil
	}
	below, err := os.ReadDir(filepath.Join(sys, "slaves"))
	if err != nil {
		return "", err
	}
	if len(below) != 1 {
		return "", fmt.Errorf("the root's device-mapper device %s sits on %d devices, not one partition: %w", sys, len(below), ErrNotNodeDisk)
	}
	return filepath.EvalSymlinks(filepath.Join(sys, "slaves", below[0].Name()))
}

func readSysInt(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Close releases what the target holds (the ESP mount, its work files).
func (t *Target) Close() error {
	var errs []error
	for i := len(t.done) - 1; i >= 0; i-- {
		errs = append(errs, t.done[i]())
	}
	t.done = nil
	if t.work != "" {
		errs = append(errs, t.scr.RemoveAll())
		t.work = ""
	}
	return errors.Join(errs...)
}

// Inactive is the slot an upgrade writes.
func (t *Target) Inactive() string {
	if t.Active == manifests.SlotB {
		return manifests.SlotA
	}
	return manifests.SlotB
}

// Entries lists strata's boot entries on the disk's ESP, newest first.
func (t *Target) Entries() ([]BootEntry, error) { return readEntries(t.esp, t.Layout) }

// Bootable reports whether a boot entry with the id entryID
// (strata-N-SLOT.conf) is on the ESP, under its counted name: one an
// upgrade staged and an interruption kept from being renamed is not,
// and no boot will try it.
func (t *Target) Bootable(entryID string) (bool, error) {
	es, err := t.Entries()
	if err != nil {
		return false, err
	}
	for _, e := range es {
		if strings.EqualFold(e.ID, entryID) {
			return true, nil
		}
	}
	return false, nil
}

// Installed is an image written to the inactive root, with its boot
// entry written under a name systemd-boot ignores until Commit.
type Installed struct {
	Slot  string    `json:"slot"`
	Entry BootEntry `json:"entry"`
	// Kernel and Initrd are the image paths booted.
	Kernel string `json:"kernel"`
	Initrd string `json:"initrd"`
	tmp    string
	t      *Target
}

// Commit makes the entry bootable (renamed to its counted name): from the
// next boot on, the firmware tries the new image first.
func (in *Installed) Commit() error {
	if err := in.t.esp.Rename(in.tmp, path.Join(path.Dir(in.tmp), in.Entry.File)); err != nil {
		return err
	}
	if err := in.t.esp.Sync(); err != nil {
		return err
	}
	return in.t.sync()
}

// Install writes image (whose manifest im was verified) to the inactive
// root partition and its kernel, initrd and boot entry (tries boots to
// reach health) to the ESP. First the image's files are verified against
// im, its kernel found, and its size checked against the partition, so a
// refused image leaves the disk as it was; then every entry booting the
// inactive root is removed, the image streamed to the partition, synced,
// read back and hashed. The entry is written under a temporary name:
// Commit makes it bootable. On a disk that boots signed UKIs (with a key
// given to SignWith) the entry is one: the kernel, the initrds and the
// command line for the new root, signed before the disk is touched and
// written to /EFI/Linux.
func (t *Target) Install(ctx context.Context, image string, im *repo.Image, tries int, progress func(string)) (*Installed, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if tries < 1 || tries > 9 {
		return nil, fmt.Errorf("upgrading %s: %d tries: want 1 to 9", t.Disk, tries)
	}
	if err := t.CheckUpgradable(ctx); err != nil {
		return nil, err
	}
	slot := t.Inactive()
	part := t.Layout.Part(rootPart(slot))
	// A regular file no larger than the partition: not a FIFO or a
	// device that never ends.
	if fi, err := os.Stat(image); err != nil {
		return nil, fmt.Errorf("upgrade image: %w", err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("upgrade image %s is not a regular file (%s): %w", image, fi.Mode().Type(), ErrNotImage)
	} else if fi.Size() > part.Size {
		return nil, fmt.Errorf("image %s (%s) does not fit root %s of %s (%s): %w", image, FormatSize(fi.Size()), strings.ToUpper(slot), t.Disk, FormatSize(part.Size), ErrTooSmall)
	}
	sum, size, err := tree.HashFileContext(ctx, image)
	if err != nil {
		return nil, err
	}
	if size > part.Size {
		return nil, fmt.Errorf("image %s (%s) does not fit root %s of %s (%s): %w", image, FormatSize(size), strings.ToUpper(slot), t.Disk, FormatSize(part.Size), ErrTooSmall)
	}
	progress(fmt.Sprintf("verifying %s", image))
	boot, err := verifyImage(ctx, image, im, t.work)
	if err != nil {
		return nil, err
	}
	if boot.kernel == "" {
		return nil, fmt.Errorf("image %s: no kernel and initrd (boot/vmlinuz-V and boot/initrd.img-V): it cannot boot from a root partition: %w", image, ErrNoKernel)
	}
	es, err := t.Entries()
	if err != nil {
		return nil, err
	}
	var active *BootEntry
	for i := range es {
		if es[i].Slot == t.Active && active == nil {
			active = &es[i]
		}
	}
	if active == nil {
		return nil, fmt.Errorf("no boot entry on the ESP of %s boots root %s, the root the node runs: %w", t.Disk, strings.ToUpper(t.Active), ErrNotNodeDisk)
	}
	// Never from a verified root to an unverified one: a repository that
	// lost (or dropped) an image's verity record must not turn the
	// kernel's checks off.
	if boot.verity == nil && strings.Contains(" "+active.Options, " "+VerityParam) {
		return nil, fmt.Errorf("image %s has no verity record (or no strata to open its root with), but root %s of %s boots through dm-verity: the upgrade would boot root %s unverified; rebuild the image with this strata, or publish it with its .verity.json: %w",
			image, strings.ToUpper(t.Active), t.Disk, strings.ToUpper(slot), ErrUnverifiedRoot)
	}
	if es, err = migrateLegacy(t.esp, es); err != nil {
		return nil, err
	}
	gen := 1
	for _, e := range es {
		gen = max(gen, e.Generation+1)
	}
	rootHash := ""
	if boot.verity != nil {
		rootHash = boot.verity.rootHash
	}
	options := withRoot(active.Options, part.GUID, rootHash)
	id := fmt.Sprintf("strata-%d-%s", gen, slot)
	signed := ""
	if t.bootImage != "" {
		// Signed already, for any node: it must boot this image.
		if boot.verity == nil {
			return nil, fmt.Errorf("image %s has no verity record (or no strata to open its root with): a boot image finds and opens its root by the signed root hash: %w", image, ErrSecureBoot)
		}
		// A copy is checked and written: what is checked is what boots.
		if signed, options, err = t.checkBootImage(es, image, boot.verity.rootHash); err != nil {
			return nil, err
		}
		progress(fmt.Sprintf("root %s boots %s, the boot image signed for the line (strata.root=auto)", strings.ToUpper(slot), t.bootImage))
	}
	if t.signer != nil {
		// Built and signed before the disk is touched.
		progress(fmt.Sprintf("signing the unified kernel image of root %s for %s", strings.ToUpper(slot), t.signer.Certificate().Subject))
		if signed, err = signUKI(ctx, boot, t.signer, t.stub, t.work, options); err != nil {
			return nil, err
		}
	}
	progress(fmt.Sprintf("removing the boot entries of root %s", strings.ToUpper(slot)))
	if _, err = removeSlot(t.esp, es, slot); err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("writing %s to root %s of %s (%s)", image, strings.ToUpper(slot), t.Disk, FormatSize(size)))
	if err := t.writeRoot(ctx, part, image, sum, size); err != nil {
		return nil, err
	}
	in := &Installed{Slot: slot, Kernel: boot.kernel, Initrd: boot.initrd, t: t}
	if signed != "" {
		// A type #2 entry: the signed UKI, counted as a loader entry is.
		in.Entry = BootEntry{ID: id + ".efi", File: fmt.Sprintf("%s+%d.efi", id, tries), Generation: gen, Slot: slot, TriesLeft: tries,
			Title: boot.title, Options: options}
		in.Entry.UKI = path.Join(ukiDir, in.Entry.File)
		in.tmp = path.Join(ukiDir, id+".new")
		if err := t.esp.Put(in.tmp, signed); err != nil {
			return nil, err
		}
		if err := t.esp.Sync(); err != nil {
			return nil, err
		}
		return in, t.sync()
	}
	dir := "/strata/" + slot
	if err := t.esp.Mkdir(dir); err != nil {
		return nil, err
	}
	puts := map[string]string{dir + "/vmlinuz": boot.kernelFile, dir + "/initrd.img": boot.initrdFile}
	verityInitrdPath := ""
	if boot.verity != nil {
		verityInitrdPath = dir + "/" + verityInitrd
		puts[verityInitrdPath] = boot.verity.initrd
	}
	for dst, src := range puts {
		if err := t.esp.Put(dst, src); err != nil {
			return nil, err
		}
	}
	in.Entry = BootEntry{ID: id + ".conf", File: fmt.Sprintf("%s+%d.conf", id, tries), Generation: gen, Slot: slot, TriesLeft: tries,
		Title: boot.title, Linux: dir + "/vmlinuz", Initrd: dir + "/initrd.img", VerityInitrd: verityInitrdPath, Options: options}
	in.tmp = path.Join(entriesDir, id+".new")
	if err := t.esp.Write(in.tmp, []byte(entryText(in.Entry))); err != nil {
		return nil, err
	}
	if err := t.esp.Sync(); err != nil {
		return nil, err
	}
	return in, t.sync()
}

// CheckUpgradable refuses (ErrSecureBoot) a disk that boots signed UKIs
// when neither a db key (SignWith) nor a boot image (BootWith) was
// given: the new root needs a signed UKI. With either it refuses a disk
// that boots plain loader entries: one signed UKI beside them would not
// make it boot under Secure Boot; with both, it refuses. Unless SignWith
// was told of a
// rotation, a key whose certificate does not verify the UKI of the root
// the node runs: the machine's firmware may not trust it, and the new
// root would not boot. It writes nothing.
func (t *Target) CheckUpgradable(ctx context.Context) error {
	es, err := t.Entries()
	if err != nil {
		return err
	}
	if t.signer != nil && t.bootImage != "" {
		return fmt.Errorf("upgrading %s: both a db key to sign the new root's kernel image with and a boot image signed already: give one: %w", t.Disk, ErrSecureBoot)
	}
	for _, e := range es {
		switch {
		case e.UKI != "" && t.signer == nil && t.bootImage == "":
			return fmt.Errorf("%s boots %s, a unified kernel image signed for Secure Boot: an upgrade needs the new image's boot image, signed where the db key is (strata secure-boot sign-image) and published with it (strata repo add-image --boot-image), or the db key to sign one, which strata keeps off nodes (strata upgrade --disk --secure-boot-key on the host that holds it): %w", t.Disk, e.UKI, ErrSecureBoot)
		case e.UKI == "" && t.signer != nil:
			return fmt.Errorf("%s boots %s, a plain loader entry, not a unified kernel image signed for Secure Boot: a signed one beside it would not make the disk boot under Secure Boot; upgrade it without --secure-boot-key, or provision it anew with one: %w", t.Disk, e.File, ErrSecureBoot)
		case e.UKI == "" && t.bootImage != "":
			return fmt.Errorf("%s boots %s, a plain loader entry, not a unified kernel image signed for Secure Boot: a boot image beside it would not make the disk boot under Secure Boot; upgrade it without one: %w", t.Disk, e.File, ErrSecureBoot)
		}
	}
	if t.signer == nil || t.rotate || t.signerOK {
		return nil
	}
	for _, e := range es {
		if e.Slot == t.Active {
			if err := t.checkSigner(ctx, e); err != nil {
				return err
			}
			t.signerOK = true
			return nil
		}
	}
	return nil
}

// maxUKI bounds a UKI copied off the ESP to check its signature.
const maxUKI = 1 << 30

// checkSigner checks that the signer's certificate verifies e, the UKI
// of the root the node runs (newest first: the one it boots).
func (t *Target) checkSigner(ctx context.Context, e BootEntry) error {
	cur := filepath.Join(t.work, "running.efi")
	defer os.Remove(cur)
	if err := t.esp.Get(e.UKI, cur, maxUKI); err != nil {
		return err
	}
	if err := t.signer.Verify(ctx, cur); err != nil {
		if !errors.Is(err, secureboot.ErrSignature) {
			return err
		}
		return fmt.Errorf("%s boots root %s from %s, which the certificate given (%s) did not sign: the machine's firmware trusts that image's signer, not necessarily this one, and could refuse root %s's at its first boot; give the db key the disk was provisioned (or last upgraded) with, or, when the firmware's db already holds this certificate (a db key rotation), --secure-boot-rotate: %w",
			t.Disk, strings.ToUpper(t.Active), e.UKI, t.signer.Certificate().Subject, strings.ToUpper(t.Inactive()), ErrSecureBoot)
	}
	return nil
}

// CheckBootImage checks the boot image given to BootWith for image
// (whose manifest im was verified) as Install would, writing nothing:
// what a dry run checks. Without a boot image it does nothing.
func (t *Target) CheckBootImage(ctx context.Context, image string, im *repo.Image) error {
	if t.bootImage == "" {
		return nil
	}
	d, err := repo.LoadVerityDoc(image, im, nil)
	if err != nil {
		return fmt.Errorf("image %s: a boot image finds and opens its root by the signed root hash: %w", image, err)
	}
	es, err := t.Entries()
	if err != nil {
		return err
	}
	p, _, err := t.checkBootImage(es, image, d.Verity.RootHash)
	if err == nil {
		err = os.Remove(p)
	}
	return err
}

// checkBootImage copies the boot image into the work directory and
// checks the copy: a signed UKI that boots rootHash, signed (unless a
// rotation) by the signer of the kernel image the node runs (es: the
// disk's entries). It returns the copy and its command line.
func (t *Target) checkBootImage(es []BootEntry, image, rootHash string) (string, string, error) {
	p := filepath.Join(t.work, "boot-image.efi")
	_ = os.Remove(p)
	if err := copyBootImage(t.bootImage, p); err != nil {
		return "", "", err
	}
	info, err := uki.CheckBootImage(p, rootHash)
	if err != nil {
		return "", "", fmt.Errorf("upgrading %s to image %s: %s: %w", t.Disk, image, t.bootImage, err)
	}
	if !t.rotate {
		if err := t.checkBootSigner(es, p); err != nil {
			return "", "", err
		}
	}
	if t.Live {
		// The machine that will boot it is this one: its firmware's db
		// and dbx tell whether it would.
		if err := checkFirmwareTrusts(efivars.DefaultDir, t.bootImage, p, t.Inactive()); err != nil {
			return "", "", err
		}
	}
	return p, info.Cmdline, nil
}

// checkFirmwareTrusts refuses the boot image at p (name, as given) when
// the firmware whose EFI variables are in dir would refuse it at the
// trial boot of slot: Secure Boot on, and its dbx revokes the signer (or
// a certificate on its chain), or its db holds no certificate that leads
// to it and nothing else an image could be admitted by. Where the
// variables do not settle it (no EFI variables, Secure Boot off, a db
// that admits images by digest, signatures that cannot be read) or
// cannot be read, the firmware decides at the trial boot, as before.
func checkFirmwareTrusts(dir, name, p, slot string) error {
	fw, err := efivars.ReadFirmware(dir)
	if err != nil || fw == nil || !fw.SecureBoot {
		return nil
	}
	sigs, err := fileSignatures(p)
	if err != nil {
		// Signatures Signers cannot read (a signer named by key
		// identifier): the firmware decides.
		return nil
	}
	verdict := efivars.Untrusted
	for _, s := range sigs {
		switch fw.Check(s.Signer, s.Certs) {
		case efivars.Revoked:
			return fmt.Errorf("boot image %s is signed by %s, whose certificate (or one it chains to) this machine's firmware revokes in its dbx (%s): the firmware would refuse root %s at its trial boot; sign the boot image with a key the db holds and the dbx does not revoke: %w",
				name, s.Signer.Subject, filepath.Join(dir, "dbx-*"), strings.ToUpper(slot), ErrSecureBoot)
		case efivars.Trusted:
			verdict = efivars.Trusted
		case efivars.TrustUnknown:
			if verdict != efivars.Trusted {
				verdict = efivars.TrustUnknown
			}
		}
	}
	if verdict != efivars.Untrusted {
		return nil
	}
	var held []string
	for _, c := range fw.DB.Certs {
		held = append(held, c.Subject.String())
	}
	db := "holds no certificate"
	if len(held) > 0 {
		db = "holds " + strings.Join(held, "; ") + ", none of which is or issued that certificate"
	}
	return fmt.Errorf("boot image %s is signed by %s, which this machine's firmware does not trust: its db (%s) %s; the firmware would refuse root %s at its trial boot. Enroll the signer's certificate in db first (docs/security.md, \"Secure Boot\"), or sign the boot image with a key the db holds: %w",
		name, sigs[0].Signer.Subject, filepath.Join(dir, "db-*"), db, strings.ToUpper(slot), ErrSecureBoot)
}

// checkBootSigner refuses the boot image at p unless one of its signers
// (as its signatures name them: the firmware checks them) signed the
// kernel image of the root the node runs, which the firmware is known to
// trust.
func (t *Target) checkBootSigner(es []BootEntry, p string) error {
	var running *BootEntry
	for i := range es {
		if es[i].Slot == t.Active && es[i].UKI != "" {
			running = &es[i]
			break
		}
	}
	if running == nil {
		return fmt.Errorf("no signed kernel image on the ESP of %s boots root %s, the root the node runs: %w", t.Disk, strings.ToUpper(t.Active), ErrNotNodeDisk)
	}
	cur := filepath.Join(t.work, "running.efi")
	defer os.Remove(cur)
	if err := t.esp.Get(running.UKI, cur, maxUKI); err != nil {
		return err
	}
	have, err := fileSigners(cur)
	if err != nil {
		return fmt.Errorf("%s: %w", running.UKI, err)
	}
	want, err := fileSigners(p)
	if err != nil {
		return fmt.Errorf("boot image %s: %w: %w", t.bootImage, manifests.ErrBootImage, err)
	}
	for _, w := range want {
		for _, h := range have {
			if w.Equal(h) {
				return nil
			}
		}
	}
	return fmt.Errorf("boot image %s is signed by %s, and root %s of %s boots %s, signed by %s: the machine's firmware is known to trust that signer, not necessarily this one, and could refuse root %s at its trial boot; sign the boot image with the db key the disk boots with, or, when the firmware's db already holds its certificate (a db key rotation), --secure-boot-rotate: %w",
		t.bootImage, want[0].Subject, strings.ToUpper(t.Active), t.Disk, running.UKI, have[0].Subject, strings.ToUpper(t.Inactive()), ErrSecureBoot)
}

// fileSignatures is uki.ReadSignatures of the file at p.
func fileSignatures(p string) (uki.Signatures, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return uki.ReadSignatures(f, fi.Size())
}

// fileSigners is uki.Signers of the file at p.
func fileSigners(p string) ([]*x509.Certificate, error) {
	sigs, err := fileSignatures(p)
	if err != nil {
		return nil, err
	}
	return sigs.Signers(), nil
}

// RemoveSlot removes the boot entries of slot (cancelling an upgrade).
func (t *Target) RemoveSlot(slot string) error {
	es, err := t.Entries()
	if err != nil {
		return err
	}
	if _, err := removeSlot(t.esp, es, slot); err != nil {
		return err
	}
	return t.sync()
}

// writeRoot streams image to partition p, checks that the bytes written
// hash as verified (sum), syncs, then reads them back from the disk
// (after dropping them from the page cache) and hashes them again.
func (t *Target) writeRoot(ctx context.Context, p Partition, image, sum string, size int64) error {
	out, off, closeOut, err := t.openPart(p)
	if err != nil {
		return err
	}
	defer closeOut()
	in, err := os.Open(image)
	if err != nil {
		return fmt.Errorf("reading %s: %w", image, err)
	}
	defer in.Close()
	h := sha256.New()
	n, err := io.Copy(io.NewOffsetWriter(out, off), io.TeeReader(io.LimitReader(ctxio.NewReader(ctx, in), p.Size+1), h))
	if err != nil {
		return fmt.Errorf("writing %s to root %s of %s: %w", image, p.Name, t.Disk, err)
	}
	if n != size || hex.EncodeToString(h.Sum(nil)) != sum {
		return fmt.Errorf("writing %s to %s of %s: the image changed after it was verified: %w", image, p.Name, t.Disk, builder.ErrImageMismatch)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", t.Disk, err)
	}
	_ = unix.Fadvise(int(out.Fd()), off, size, unix.FADV_DONTNEED)
	h.Reset()
	if _, err := io.Copy(h, ctxio.NewReader(ctx, io.NewSectionReader(out, off, size))); err != nil {
		return fmt.Errorf("reading back %s of %s: %w", p.Name, t.Disk, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != sum {
		return fmt.Errorf("reading back %s of %s: the bytes on the disk differ from the image written: %w", p.Name, t.Disk, builder.ErrImageMismatch)
	}
	return nil
}

// openPart opens partition p for writing: on a running node its device
// node, exclusively (the kernel refuses while it is mounted); offline, the
// locked disk at the partition's offset.
func (t *Target) openPart(p Partition) (*os.File, int64, func(), error) {
	if !t.Live {
		return t.f, p.Offset, func() {}, nil
	}
	f, err := os.OpenFile(t.parts[p.Index], os.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("opening %s (%s) exclusively: %w", t.parts[p.Index], p.Name, err)
	}
	return f, 0, func() { f.Close() }, nil
}

// sync flushes an offline disk (mtools wrote through its own handle).
func (t *Target) sync() error {
	if t.Live {
		return nil
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", t.Disk, err)
	}
	return nil
}
