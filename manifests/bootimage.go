package manifests

import (
	"fmt"
	"strings"
)

// A boot image is a unified kernel image signed for UEFI Secure Boot that
// boots one image on any node of its line (strata secure-boot
// sign-image): its command line names the verified root device, the
// signed root hash and strata.root=auto instead of a partition, and no
// host name, so the same signed file serves every node, and a node can
// upgrade itself without the db key.
const (
	// RootParam names the partition below the verified root (or "auto").
	RootParam = "strata.root="
	// RootAuto is RootParam's value in a boot image: the initramfs takes
	// the partition whose hash tree matches the root hash.
	RootAuto = "auto"
	// MaxBootImageSize bounds a boot image (a kernel and initrds).
	MaxBootImageSize = 1 << 30
)

// ErrBootImage reports a kernel image that is not a boot image of the
// image it is offered with.
var ErrBootImage = Rejection("not a boot image of this image")

// BootImageCmdline is the command line of the boot image of the image
// whose root hash is rootHash: the verified device, strata.root=auto, the
// root hash, a read-only squashfs root, the console on the screen and
// the first serial port, and a reboot 10 s after a panic (a boot that
// cannot start uses up a try).
func BootImageCmdline(rootHash string) string {
	return "root=/dev/mapper/" + VerityRootDevice + " " + RootParam + RootAuto + " " + VerityParam + rootHash +
		" ro rootfstype=squashfs console=tty0 console=ttyS0,115200 panic=10"
}

// CheckBootImageCmdline refuses a command line that is not exactly the
// one BootImageCmdline gives for rootHash: the one SignImage signs. Any
// other parameter (init=, systemd.unit=, strata.activate=0, a host name,
// a quoted one systemd would read) could change what every node of the
// line boots, and a node cannot check the signature over it.
func CheckBootImageCmdline(cmdline, rootHash string) error {
	if want := BootImageCmdline(rootHash); cmdline != want {
		return fmt.Errorf("%w: its command line is %q, not the one a boot image of root hash %s has (%q)", ErrBootImage, cmdline, rootHash, want)
	}
	return nil
}

// BootImageRef locates an image's boot image in a repository.
type BootImageRef struct {
	// File is the path relative to the repository, under images/, ending
	// in .efi.
	File string `json:"file"`
	// SHA256 and Size are the file's: readers stop at Size.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// validate checks the ref's form.
func (b *BootImageRef) validate() error {
	if err := ValidPath(b.File); err != nil || !strings.HasPrefix(b.File, "images/") || !strings.HasSuffix(b.File, ".efi") {
		return fmt.Errorf("%w: boot image %q: not an .efi file under images/", ErrInvalid, b.File)
	}
	if !validHex(b.SHA256, 64) || b.Size <= 0 || b.Size > MaxBootImageSize {
		return fmt.Errorf("%w: boot image %s: sha256 %q or size %d missing or malformed (at most %d bytes)", ErrInvalid, b.File, b.SHA256, b.Size, int64(MaxBootImageSize))
	}
	return nil
}
