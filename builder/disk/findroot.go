package disk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/verity"
	"github.com/strata-dev/strata/manifests"
)

// Finding the root. A unified kernel image built for any node of a line
// (SignImage) cannot name a partition: its command line says
// strata.root=auto, and the initramfs asks FindRoot which partition holds
// the image the signed root hash names. FindRoot reads one block of each
// candidate, the top block of the hash tree where the signed record puts
// it, and takes the partition whose digest is the root hash. That only
// finds the device: dm-verity then checks every block read against the
// same root hash, so a partition that merely copies the top block gains
// nothing.
//
// When more than one partition matches (a disk cloned onto another, or
// the same image on both roots), systemd-boot's variables decide: the
// partitions on the disk of the ESP the firmware booted from
// (LoaderDevicePartUUID), then the root partition of the slot the
// selected entry is named for (LoaderEntrySelected, strata-GEN-SLOT).
// Still more than one is an error that names them.
const (
	// loaderGUID is systemd-boot's vendor GUID for its EFI variables.
	loaderGUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
	maxEFIVar  = 4096
)

// ErrRootNotFound reports that no partition holds the image a root hash
// names, or that more than one does and nothing tells them apart.
var ErrRootNotFound = manifests.Rejection("no partition holds the image")

// FindRootOptions say where FindRoot looks.
type FindRootOptions struct {
	// RootHash is the root hash the kernel command line names.
	RootHash string
	// Dir holds the verity initrd's files (default VerityInitrdDir).
	Dir string
	// Sys and Dev are where sysfs and the device nodes are (default
	// /sys and /dev; tests give others).
	Sys, Dev string
}

// FindRoot returns the partition that holds the image whose signed verity
// record (in o.Dir, checked as OpenRoot checks it) names o.RootHash.
func FindRoot(ctx context.Context, o FindRootOptions) (string, error) {
	if o.Dir == "" {
		o.Dir = VerityInitrdDir
	}
	if o.Sys == "" {
		o.Sys = "/sys"
	}
	if o.Dev == "" {
		o.Dev = "/dev"
	}
	v, _, err := CheckRootRecord(o.Dir, o.RootHash)
	if err != nil {
		return "", err
	}
	p, root, err := verity.FromRecord(v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnverifiedRoot, err)
	}
	parts, err := partitions(o.Sys)
	if err != nil {
		return "", err
	}
	need := max(p.DataSize(), v.HashOffset+p.TreeSize())
	var found []partition
	var unreadable []string
	for _, pt := range parts {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		// A device that cannot be read holds nothing this boot can use;
		// it is named should no other hold the image.
		ok, err := holdsRoot(filepath.Join(o.Dev, pt.name), need, p, root)
		if err != nil {
			unreadable = append(unreadable, err.Error())
		}
		if ok {
			found = append(found, pt)
		}
	}
	found = preferBooted(found, o.Sys, o.Dev)
	switch len(found) {
	case 0:
		also := ""
		if len(unreadable) > 0 {
			also = " (unreadable: " + strings.Join(unreadable, "; ") + ")"
		}
		return "", fmt.Errorf("no partition holds image %s-%s (root hash %s) and its hash tree; %d partitions looked at%s: %w", v.Line, v.Version, v.RootHash, len(parts), also, ErrRootNotFound)
	case 1:
		return filepath.Join(o.Dev, found[0].name), nil
	}
	var names []string
	for _, pt := range found {
		names = append(names, filepath.Join(o.Dev, pt.name))
	}
	return "", fmt.Errorf("partitions %s all hold image %s-%s (root hash %s), and the boot loader's variables do not tell which one this boot is for; detach the disks that are not this node's: %w", strings.Join(names, ", "), v.Line, v.Version, v.RootHash, ErrRootNotFound)
}

// partition is a disk partition as sysfs lists it.
type partition struct {
	name, disk string
	index      int
}

// partitions lists the partitions in sys/class/block.
func partitions(sys string) ([]partition, error) {
	dir := filepath.Join(sys, "class", "block")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("finding the root: %w", err)
	}
	var out []partition
	for _, e := range ents {
		idx, err := readSysInt(filepath.Join(dir, e.Name(), "partition"))
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("finding the root: %w", err)
		}
		out = append(out, partition{name: e.Name(), disk: filepath.Base(filepath.Dir(real)), index: idx})
	}
	return out, nil
}

// holdsRoot reports whether the block device (or, in tests, regular
// file) at p is at least need bytes and its tree's top block matches root.
// A device that is gone or cannot be opened holds nothing.
func holdsRoot(p string, need int64, params verity.Params, root []byte) (bool, error) {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() && fi.Mode()&os.ModeDevice == 0 {
		return false, nil
	}
	size, err := deviceSize(p)
	if err != nil || size < need {
		return false, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	ok, err := verity.MatchesRoot(f, params, root)
	if err != nil {
		return false, fmt.Errorf("%s: %w", p, err)
	}
	return ok, nil
}

// selectedRe reads the slot from the entry systemd-boot selected.
var selectedRe = regexp.MustCompile(`^(?i:strata)-[0-9]+-([abAB])(?:\+[0-9-]+)?\.(?i:efi|conf)$`)

// preferBooted keeps of found the partitions on the disk of the ESP the
// firmware booted from, when systemd-boot's variables name it (a disk
// plugged in beside it is never taken then, even when the boot disk holds
// no match), then, of several, the root partition of the selected entry's
// slot.
func preferBooted(found []partition, sys, dev string) []partition {
	vars := filepath.Join(sys, "firmware", "efi", "efivars")
	if esp := readEFIString(filepath.Join(vars, "LoaderDevicePartUUID-"+loaderGUID)); esp != "" {
		if real, err := filepath.EvalSymlinks(filepath.Join(dev, "disk", "by-partuuid", strings.ToLower(esp))); err == nil {
			if disk := diskOf(sys, filepath.Base(real)); disk != "" {
				found = slices.DeleteFunc(found, func(p partition) bool { return p.disk != disk })
			}
		}
	}
	if len(found) < 2 {
		return found
	}
	if m := selectedRe.FindStringSubmatch(readEFIString(filepath.Join(vars, "LoaderEntrySelected-"+loaderGUID))); m != nil {
		idx := PartRootA
		if strings.EqualFold(m[1], manifests.SlotB) {
			idx = PartRootB
		}
		found = narrow(found, func(p partition) bool { return p.index == idx })
	}
	return found
}

// narrow keeps the elements of found that keep accepts, unless none does.
func narrow(found []partition, keep func(partition) bool) []partition {
	out := slices.DeleteFunc(slices.Clone(found), func(p partition) bool { return !keep(p) })
	if len(out) == 0 {
		return found
	}
	return out
}

// diskOf returns the disk a partition (a name in sys/class/block) is on.
func diskOf(sys, name string) string {
	real, err := filepath.EvalSymlinks(filepath.Join(sys, "class", "block", name))
	if err != nil {
		return ""
	}
	return filepath.Base(filepath.Dir(real))
}

// readEFIString reads an EFI variable of efivarfs holding a UTF-16LE
// string (four bytes of attributes first); "" when it is absent or not
// one.
func readEFIString(p string) string {
	b, err := safefile.Read(p, maxEFIVar)
	if err != nil || len(b) < 4 || len(b)%2 != 0 {
		return ""
	}
	b = b[4:]
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := uint16(b[i]) | uint16(b[i+1])<<8
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}
