package disk

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Errors Provision reports, both of the manifests.ErrRejected class.
var (
	// ErrTooSmall reports a disk smaller than the layout needs.
	ErrTooSmall = manifests.Rejection("disk too small")
	// ErrMounted reports a block device (or one of its partitions)
	// that is mounted.
	ErrMounted = manifests.Rejection("block device is mounted")
)

// Options configures Provision.
type Options struct {
	// Size is the disk size in bytes. For a file, 0 means the layout's
	// minimum with DefaultStateSize of state; for a block device, 0 means
	// the whole device (a larger Size is refused).
	Size int64
	// NodeID names the node; with the image digest it determines every
	// GUID on the disk. Empty: a random one (reported in the result).
	NodeID string
	// Hostname, if set, is written to the state partition's identity and
	// given to systemd on the kernel command line (systemd.hostname=).
	// It must be a valid host name (RFC 1123 labels).
	Hostname string
	// AuthorizedKeys, if set, is written as the node's SSH authorized_keys.
	AuthorizedKeys []byte
	// BootEFI is systemd-boot's EFI binary (default DefaultBootEFI).
	BootEFI string
	// SecureBoot, if set, is the db key the disk boots under UEFI Secure
	// Boot with: systemd-boot and a unified kernel image are signed with
	// it in place of a plain kernel and loader entry (see signBoot). The
	// image must have a kernel and a verity record.
	SecureBoot *secureboot.Signer
	// Stub is systemd's EFI stub the UKI is built on (default
	// DefaultStub).
	Stub string
	// BootImage and SignedLoader, instead of SecureBoot, make a disk
	// that boots under Secure Boot without the db key: the image's boot
	// image (SignImage) and systemd-boot signed with the same key
	// (SignLoader), both made where the key is. The boot image must
	// boot exactly the image's root hash; both must name the same
	// signer. The node then takes its host name from the state
	// partition (the boot image names none).
	BootImage, SignedLoader string
	// Progress, if set, gets a short line per step.
	Progress func(step string)
}

// Result describes a provisioned disk.
type Result struct {
	Disk   string                `json:"disk"`
	Device bool                  `json:"block_device"`
	NodeID string                `json:"node_id"`
	Layout *Layout               `json:"layout"`
	Ledger manifests.LedgerEntry `json:"ledger"`
	// Kernel and Initrd are the image paths booted (copied to the ESP,
	// or inside the UKI); empty (and BootEntry false) when the image has
	// no kernel: the ESP then holds systemd-boot and loader.conf but no
	// boot entry. On a Secure Boot disk the boot entry is the UKI (a
	// type #2 entry), not a loader entry file.
	Kernel    string `json:"kernel,omitempty"`
	Initrd    string `json:"initrd,omitempty"`
	BootEntry bool   `json:"boot_entry"`
	// RootHash is the dm-verity root hash root A is opened with at boot;
	// empty when it boots unverified (no verity record or no strata in
	// the image).
	RootHash string `json:"root_hash,omitempty"`
	// UKI is the signed unified kernel image on the ESP of a Secure Boot
	// disk (Options.SecureBoot).
	UKI string `json:"uki,omitempty"`
	// Note says what the caller should know but is no error (a device
	// whose partition table the kernel did not re-read).
	Note string `json:"note,omitempty"`
}

// Provision writes a bootable GPT disk for a node to diskPath, a raw image
// file or a block device, from a signed squashfs image (layout: see
// Layout's constants). The image is verified first — its manifest's
// signature (against trust, or nil: the keys it lists), then every entry
// and every file's content against the manifest, as builder.Provision does — and
// the bytes copied to root A must hash the same as the bytes verified.
// A file is written beside diskPath and renamed over it when complete; a block
// device is written in place and refused if it or a partition of it is
// mounted.
func Provision(ctx context.Context, image, diskPath string, trust *sign.KeySet, opts Options) (*Result, error) {
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if opts.Hostname != "" {
		if err := CheckHostname(opts.Hostname); err != nil {
			return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
		}
	}
	im, err := repo.LoadImage(image, trust)
	if err != nil {
		return nil, err
	}
	imgSum, imgSize, err := tree.HashFileContext(ctx, image)
	if err != nil {
		return nil, err
	}
	res := &Result{Disk: diskPath, NodeID: opts.NodeID}
	if res.NodeID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("provisioning %s: node id: %w", diskPath, err)
		}
		res.NodeID = hex.EncodeToString(b[:])
	}
	size, device, err := diskTarget(diskPath, opts.Size)
	if err != nil {
		return nil, err
	}
	res.Device = device
	if res.Layout, err = planLayout(size, imgSize, im.Digest, res.NodeID); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	workDir, err := scratch.MkdirTemp("disk")
	if err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	defer workDir.RemoveAll()
	work := workDir.Path

	progress(fmt.Sprintf("verifying %s", image))
	boot, err := verifyImage(ctx, image, im, work)
	if err != nil {
		return nil, err
	}
	boot.rootA = res.Layout.Part(PartRootA).GUID
	boot.hostname = opts.Hostname
	var signed *signedBoot
	switch {
	case opts.SecureBoot != nil && (opts.BootImage != "" || opts.SignedLoader != ""):
		return nil, fmt.Errorf("provisioning %s: a db key to sign with, or a boot image and a signed boot loader signed already: give one: %w", diskPath, ErrSecureBoot)
	case opts.SecureBoot != nil:
		progress("building and signing the unified kernel image and systemd-boot")
		if signed, err = signBoot(ctx, boot, opts.SecureBoot, opts.BootEFI, opts.Stub, work); err != nil {
			return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
		}
	case opts.BootImage != "" || opts.SignedLoader != "":
		progress("checking the boot image and the signed boot loader")
		if signed, err = presignedBoot(boot, opts.BootImage, opts.SignedLoader, work); err != nil {
			return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
		}
	}

	target := diskPath
	undoParents := func() {} // missing parents of a disk file, made below
	defer func() { undoParents() }()
	if !device {
		target = filepath.Join(filepath.Dir(diskPath), "."+filepath.Base(diskPath)+".provisioning")
		if undoParents, err = safefile.MkdirParents(target); err != nil {
			return nil, err
		}
		_ = os.Remove(target)
		defer os.Remove(target) // a no-op once renamed
	}
	progress(fmt.Sprintf("writing the partition table and ESP of %s (%s)", diskPath, FormatSize(res.Layout.Size)))
	if err := writeTable(target, device, res.Layout); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	if err := writeESP(ctx, target, res.Layout.Part(PartESP), boot, opts.BootEFI, signed, work); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	res.Kernel, res.Initrd, res.BootEntry = boot.kernel, boot.initrd, boot.kernel != ""
	if signed != nil {
		res.UKI = ukiDir + "/strata-1-a.efi"
		progress(fmt.Sprintf("Secure Boot: %s and systemd-boot signed for %s", res.UKI, signed.signer))
	}
	if boot.verity != nil {
		res.RootHash = boot.verity.rootHash
		progress(fmt.Sprintf("root A opens through dm-verity at boot (root hash %s)", res.RootHash))
	} else if res.BootEntry {
		progress("root A boots unverified: the image has no verity record or no strata to open it with")
	}

	progress(fmt.Sprintf("copying %s into root A", image))
	if err := writeRoots(ctx, target, device, res.Layout, image, imgSum); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}

	progress("writing the state partition")
	e, err := writeState(ctx, target, res.Layout.Part(PartState), im, image, res.NodeID, opts, work)
	if err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	res.Ledger = e
	if err := syncPath(target); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	if device {
		res.Note = rereadTable(diskPath)
	} else if err := os.Rename(target, diskPath); err != nil {
		return nil, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	undoParents = func() {}
	progress(fmt.Sprintf("disk %s: %s %s, root A %s", diskPath, e.Line, e.Head.Version, res.Layout.Part(PartRootA).GUID))
	return res, nil
}

// diskTarget inspects disk: a block device (its size; refused if mounted)
// or a regular file, possibly absent (size as asked).
func diskTarget(diskPath string, size int64) (int64, bool, error) {
	fi, err := os.Stat(diskPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return size, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("provisioning %s: %w", diskPath, err)
	case fi.Mode().IsRegular():
		return size, false, nil
	case fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0:
		return 0, false, fmt.Errorf("provisioning %s: not a regular file or block device (%s)", diskPath, fi.Mode().Type())
	}
	if err := checkNotMounted(diskPath, fi); err != nil {
		return 0, true, fmt.Errorf("provisioning %w", err)
	}
	f, err := os.Open(diskPath)
	if err != nil {
		return 0, true, fmt.Errorf("provisioning %s: %w", diskPath, err)
	}
	defer f.Close()
	devSize, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, true, fmt.Errorf("provisioning %s: size: %w", diskPath, err)
	}
	if size > devSize {
		return 0, true, fmt.Errorf("provisioning %s: --size %s exceeds the device's %s: %w", diskPath, FormatSize(size), FormatSize(devSize), ErrTooSmall)
	}
	if size == 0 {
		size = devSize
	}
	return size, true, nil
}

// writeTable creates the disk file (or opens the device, exclusively:
// the kernel refuses that while a partition is mounted) and writes the
// protective MBR and both GPTs with go-diskfs's gpt.Table. The kernel is
// asked to re-read a device's table only at the end (rereadTable).
func writeTable(target string, device bool, l *Layout) error {
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if device {
		flags = os.O_RDWR | os.O_EXCL // exclusive open of a block device
	}
	f, err := os.OpenFile(target, flags, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s: %w", target, err)
	}
	defer f.Close()
	if !device {
		if err := f.Truncate(l.Size); err != nil {
			return fmt.Errorf("sizing %s: %w", target, err)
		}
	}
	if err := l.table().Write(f, l.Size); err != nil {
		return fmt.Errorf("writing the partition table of %s: %w", target, err)
	}
	return f.Close()
}

// rereadTable asks the kernel to re-read the device's partition table
// (BLKRRPART), reporting a failure (a loop device without partition
// scanning, a busy disk) as a note rather than an error: the table on disk
// is complete either way.
func rereadTable(dev string) string {
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Sprintf("partition table not re-read: %v", err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err != nil {
		return fmt.Sprintf("the kernel did not re-read the partition table of %s (%v): re-attach or reboot to see the partitions", dev, err)
	}
	return ""
}

// writeRoots copies the image into root A, checking the bytes hash as
// verified, and clears the start of root B (stale signatures on a device).
func writeRoots(ctx context.Context, target string, device bool, l *Layout, image, sum string) error {
	out, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", target, err)
	}
	defer out.Close()
	in, err := os.Open(image)
	if err != nil {
		return fmt.Errorf("reading %s: %w", image, err)
	}
	defer in.Close()
	a := l.Part(PartRootA)
	h := sha256.New()
	n, err := io.Copy(io.NewOffsetWriter(out, a.Offset), io.TeeReader(io.LimitReader(ctxio.NewReader(ctx, in), a.Size+1), h))
	if err != nil {
		return fmt.Errorf("copying %s into root A of %s: %w", image, target, err)
	}
	if n > a.Size || hex.EncodeToString(h.Sum(nil)) != sum {
		return fmt.Errorf("copying %s into root A of %s: the image changed after it was verified: %w", image, target, builder.ErrImageMismatch)
	}
	if device {
		b := l.Part(PartRootB)
		if _, err := out.WriteAt(make([]byte, MiB), b.Offset); err != nil {
			return fmt.Errorf("clearing root B of %s: %w", target, err)
		}
	}
	return out.Close()
}

func syncPath(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", p, err)
	}
	return f.Close()
}

// ErrHostname reports a host name that is not RFC 1123 labels.
var ErrHostname = errors.New("not a host name")

// CheckHostname checks that h is a host name of RFC 1123 labels (1-63
// letters, digits or '-' each, not starting or ending with '-', joined by
// dots, 253 characters at most); the error says what is wrong.
func CheckHostname(h string) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("hostname %q: %w: %s", h, ErrHostname, fmt.Sprintf(format, a...))
	}
	if len(h) == 0 || len(h) > 253 {
		return bad("%d characters, want 1-253", len(h))
	}
	for _, label := range strings.Split(h, ".") {
		switch {
		case len(label) == 0:
			return bad("an empty label (a leading, trailing or doubled dot)")
		case len(label) > 63:
			return bad("label %q has %d characters, at most 63", label[:20]+"...", len(label))
		case label[0] == '-' || label[len(label)-1] == '-':
			return bad("label %q starts or ends with '-'", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return bad("%q is not allowed (letters, digits and '-' only, dots between labels)", c)
			}
		}
	}
	return nil
}
