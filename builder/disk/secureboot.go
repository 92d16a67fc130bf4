package disk

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
)

// Secure Boot. A disk provisioned with a db key (Options.SecureBoot)
// boots nothing the firmware has not checked against that key:
//
//	/EFI/BOOT/BOOTX64.EFI, /EFI/systemd/systemd-bootx64.efi  systemd-boot, signed
//	/EFI/Linux/strata-1-a.efi                               a signed unified kernel image
//	/loader/loader.conf                                     default strata-*, editor no
//
// The unified kernel image (package uki) carries the kernel, the verity
// initrd and the image's initrd as one initrd, and the command line
// with the root hash; the signature covers all of it, and systemd's stub
// ignores a command line the boot loader passes under Secure Boot. The
// firmware refuses a UKI with one byte changed, and the root hash on the
// command line makes the kernel refuse a changed block of the root: the
// chain runs from the firmware's db to the last byte read. systemd-boot
// lists UKIs in /EFI/Linux as Boot Loader Specification type #2 entries;
// the .osrel section names the same ID and version for every strata UKI,
// so they sort by file name, newest generation first, as loader entries
// do.
const (
	// DefaultStub is systemd's EFI stub as Debian's systemd-boot-efi
	// package installs it.
	DefaultStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	ukiDir      = "/EFI/Linux"
	loaderSB    = loaderDefault + "timeout 3\neditor no\n"
)

// ErrSecureBoot reports a Secure Boot disk asked to do what needs the db
// key, which stays off nodes, or an image that cannot be booted under
// Secure Boot.
var ErrSecureBoot = manifests.Rejection("not possible under Secure Boot")

// signedBoot is what a Secure Boot ESP holds: signed copies (work files)
// of systemd-boot and of the UKI.
type signedBoot struct {
	bootEFI, uki string
	// signer is the subject of the certificate they are signed for.
	signer string
}

// signBoot builds the UKI of b and signs it and systemd-boot with s, all
// in work, before anything is written to the disk. An image without a
// kernel, or whose root would boot unverified, is refused: a signed
// kernel over a root nothing checks would end the chain at the kernel.
func signBoot(ctx context.Context, b *bootFiles, s *secureboot.Signer, bootEFI, stub, work string) (*signedBoot, error) {
	if b.kernel == "" {
		return nil, fmt.Errorf("secure boot: the image has no kernel and initrd to sign: %w", ErrNoKernel)
	}
	signed, err := signUKI(ctx, b, s, stub, work, bootOptions(b))
	if err != nil {
		return nil, err
	}
	if bootEFI == "" {
		bootEFI = DefaultBootEFI
	}
	out := &signedBoot{bootEFI: filepath.Join(work, "systemd-boot.signed.efi"), uki: signed, signer: s.Certificate().Subject.String()}
	if err := s.Sign(ctx, bootEFI, out.bootEFI); err != nil {
		return nil, fmt.Errorf("secure boot: %w", err)
	}
	return out, nil
}

// signUKI builds the UKI of b with the command line cmdline on stub ("":
// DefaultStub) and signs it with s, in work; it returns the signed
// file's path. b must boot a verified root.
func signUKI(ctx context.Context, b *bootFiles, s *secureboot.Signer, stub, work, cmdline string) (string, error) {
	if b.verity == nil {
		return "", fmt.Errorf("secure boot: the image has no verity record (or no strata to open its root with): a signed kernel would mount a root nothing verifies; rebuild the image with this strata: %w", ErrSecureBoot)
	}
	if stub == "" {
		stub = DefaultStub
	}
	stubBytes, err := safefile.ReadFollow(stub, uki.MaxStubSize)
	if err != nil {
		return "", fmt.Errorf("secure boot: systemd's EFI stub (install systemd-boot-efi): %w", err)
	}
	raw, signed := filepath.Join(work, "strata.efi"), filepath.Join(work, "strata.signed.efi")
	if err := writeUKI(raw, stubBytes, b, cmdline); err != nil {
		return "", err
	}
	defer os.Remove(raw)
	if err := s.Sign(ctx, raw, signed); err != nil {
		return "", fmt.Errorf("secure boot: %w", err)
	}
	return signed, nil
}

// writeUKI writes the unsigned UKI of b to p: its initrd is the verity
// initrd followed by the image's (an uncompressed cpio first, as
// entryText orders them), its command line cmdline (what a loader
// entry's options would be).
func writeUKI(p string, stub []byte, b *bootFiles, cmdline string) error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	open := func(name string) (*os.File, int64, error) {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, fmt.Errorf("secure boot: %w", err)
		}
		files = append(files, f)
		fi, err := f.Stat()
		if err != nil {
			return nil, 0, fmt.Errorf("secure boot: %w", err)
		}
		return f, fi.Size(), nil
	}
	kernel, kernelSize, err := open(b.kernelFile)
	if err != nil {
		return err
	}
	vInitrd, vSize, err := open(b.verity.initrd)
	if err != nil {
		return err
	}
	initrd, initrdSize, err := open(b.initrdFile)
	if err != nil {
		return err
	}
	out, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("secure boot: %w", err)
	}
	defer out.Close()
	err = uki.Build(out, stub, uki.Parts{
		OSRelease:  osRelease(b.title),
		Cmdline:    cmdline,
		Initrd:     io.MultiReader(vInitrd, initrd),
		InitrdSize: vSize + initrdSize,
		Kernel:     kernel,
		KernelSize: kernelSize,
	})
	if err != nil {
		return fmt.Errorf("secure boot: the unified kernel image: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("secure boot: %w", err)
	}
	return nil
}

// osRelease is a strata UKI's .osrel: the same ID and version for all of
// them (systemd-boot then orders them by file name), and the image as
// the menu title.
func osRelease(title string) []byte {
	title = strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || r == '`' || r == '$' || r < ' ' {
			return '_'
		}
		return r
	}, title)
	return []byte("ID=strata\nVERSION_ID=1\nPRETTY_NAME=\"" + title + "\"\n")
}

// osReleaseTitle reads PRETTY_NAME back.
func osReleaseTitle(osrel string) string {
	for _, l := range strings.Split(osrel, "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// bootOptions is the command line of b's root A: root (through
// dm-verity when b has a root hash), read-only squashfs, the console on
// the screen and the first serial port, and the host name.
func bootOptions(b *bootFiles) string {
	rootHash := ""
	if b.verity != nil {
		rootHash = b.verity.rootHash
	}
	o := rootOptions(b.rootA, rootHash) + " ro rootfstype=squashfs console=tty0 console=ttyS0,115200"
	if b.hostname != "" {
		o += " systemd.hostname=" + b.hostname
	}
	return o
}
