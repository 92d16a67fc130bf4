package node

import (
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// RootIntegrity says whether the kernel checks every block of a booted
// disk node's root image as it reads it.
type RootIntegrity struct {
	// Mode is RootVerified or RootUnverified.
	Mode string `json:"mode"`
	// Device is what the root is mounted from ("major:minor" and, when it
	// has one, its device-mapper name).
	Device string `json:"device"`
	// RootHash is the root hash the boot entry named (strata.verity=).
	RootHash string `json:"root_hash,omitempty"`
	// Note says what an unverified root means and what to do.
	Note string `json:"note,omitempty"`
}

// RootIntegrity modes.
const (
	RootVerified   = "dm-verity"
	RootUnverified = "unverified"
)

// squashfsMagic is the squashfs file system type statfs reports.
const squashfsMagic = 0x73717368

// rootIntegrity reads how the running node's root is mounted: nil unless
// root is "/" on a squashfs image (a booted disk node).
func rootIntegrity(root string) *RootIntegrity {
	if root != "/" {
		return nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs("/", &fs); err != nil || fs.Type != squashfsMagic {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return nil
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	name, uuid, cmdline := "", "", ""
	if b, err := safefile.Read(filepath.Join("/sys/dev/block", dev, "dm", "name"), 4096); err == nil {
		name = strings.TrimSpace(string(b))
	}
	if b, err := safefile.Read(filepath.Join("/sys/dev/block", dev, "dm", "uuid"), 4096); err == nil {
		uuid = strings.TrimSpace(string(b))
	}
	if b, err := safefile.Read("/proc/cmdline", 64<<10); err == nil {
		cmdline = string(b)
	}
	return judgeRoot(dev, name, uuid, cmdline)
}

// judgeRoot says how a root on device dev (major:minor; dmName and
// dmUUID its device-mapper name and UUID, "" for none) booted with kernel
// command line cmdline is checked. veritysetup gives the devices it makes
// UUIDs that start CRYPT-VERITY-; the device's table is not read.
func judgeRoot(dev, dmName, dmUUID, cmdline string) *RootIntegrity {
	ri := &RootIntegrity{Mode: RootUnverified, Device: dev}
	if dmName != "" {
		ri.Device += " (" + dmName + ")"
	}
	for _, f := range strings.Fields(cmdline) {
		if h, ok := strings.CutPrefix(f, manifests.VerityParam); ok {
			ri.RootHash = h
		}
	}
	switch {
	case dmName == manifests.VerityRootDevice && strings.HasPrefix(dmUUID, "CRYPT-VERITY-") && ri.RootHash != "":
		ri.Mode = RootVerified
	case ri.RootHash != "":
		ri.Note = "the boot entry names a root hash, but the root is not the dm-verity device " + manifests.VerityRootDevice + ": the image's initramfs does not open it (see docs/images.md, A verified root)"
	default:
		ri.Note = "the boot entry names no root hash: the image has no verity record or no strata, or the disk was provisioned before strata opened roots through dm-verity; an upgrade to an image built now turns it on"
	}
	return ri
}
