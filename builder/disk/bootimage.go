package disk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/scratch"
	"github.com/strata-dev/strata/internal/secureboot"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/uki"
	"github.com/strata-dev/strata/manifests"
)

// Boot images. A disk provisioned for Secure Boot boots kernel images
// signed with a db key that stays on the host that holds it; an upgrade
// needs one for the new root. A boot image is one signed once, in CI,
// for every node of the line: its command line names the root hash and
// strata.root=auto, no partition and no host name
// (manifests.BootImageCmdline). The initramfs finds the partition by the
// root hash (FindRoot) and takes the host name from the state
// partition's identity. Published with the image (repo add-image
// --boot-image), it lets a node upgrade itself: Install writes it as the
// new root's counted entry instead of signing one.

// BootImage describes a boot image SignImage wrote.
type BootImage struct {
	File    string `json:"file"`
	Line    string `json:"line"`
	Version string `json:"version"`
	// Kernel is the image path of the kernel it boots.
	Kernel   string `json:"kernel"`
	RootHash string `json:"root_hash"`
	Cmdline  string `json:"cmdline"`
	// Signer is the subject of the db certificate.
	Signer string `json:"signer"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// SignImage verifies image (its manifest against trust, nil: the keys it
// lists; then every file) and writes its boot image to out ("":
// repo.BootImagePath(image)), signed with s on systemd's EFI stub stub
// ("": DefaultStub). The image must have a kernel and a verity record.
// out is written whole or not at all.
func SignImage(ctx context.Context, image, out string, trust *sign.KeySet, s *secureboot.Signer, stub string) (*BootImage, error) {
	if out == "" {
		out = repo.BootImagePath(image)
	}
	im, err := repo.LoadImage(image, trust)
	if err != nil {
		return nil, err
	}
	scr, err := scratch.MkdirTemp("sign-image")
	if err != nil {
		return nil, fmt.Errorf("signing the boot image of %s: %w", image, err)
	}
	defer scr.RemoveAll()
	b, err := verifyImage(ctx, image, im, scr.Path)
	if err != nil {
		return nil, err
	}
	if b.kernel == "" {
		return nil, fmt.Errorf("signing the boot image of %s: no kernel and initrd (boot/vmlinuz-V and boot/initrd.img-V): %w", image, ErrNoKernel)
	}
	if b.verity == nil {
		return nil, fmt.Errorf("signing the boot image of %s: the image has no verity record (or no strata to open its root with), and a boot image finds and opens its root by the root hash; rebuild the image with this strata: %w", image, ErrSecureBoot)
	}
	cmdline := manifests.BootImageCmdline(b.verity.rootHash)
	signed, err := signUKI(ctx, b, s, stub, scr.Path, cmdline)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(signed)
	if err != nil {
		return nil, fmt.Errorf("signing the boot image of %s: %w", image, err)
	}
	if err := safefile.WriteAtomic(out, raw, 0o644); err != nil {
		return nil, fmt.Errorf("signing the boot image of %s: %w", image, err)
	}
	sum := sha256.Sum256(raw)
	return &BootImage{File: out, Line: im.Manifest.Line, Version: im.Manifest.Version, Kernel: b.kernel, RootHash: b.verity.rootHash,
		Cmdline: cmdline, Signer: s.Certificate().Subject.String(), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(raw))}, nil
}

// copyBootImage copies the boot image at src (a regular file, at most
// manifests.MaxBootImageSize bytes) to the new file dst.
func copyBootImage(src, dst string) error {
	return copyEFI("boot image", manifests.ErrBootImage, src, dst)
}

// copyEFI copies the EFI binary at src (what it is, for errors; a
// regular file, at most manifests.MaxBootImageSize bytes) to the new file
// dst. What is not a regular file, or is too large, is refused with
// reject.
func copyEFI(what string, reject error, src, dst string) (err error) {
	in, err := safefile.OpenFollow(src)
	if errors.Is(err, safefile.ErrNotRegular) {
		return fmt.Errorf("%s: %w: %w", what, reject, err)
	} else if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	} else if fi.Size() > manifests.MaxBootImageSize {
		return fmt.Errorf("%s %s is %d bytes (at most %d): %w", what, src, fi.Size(), int64(manifests.MaxBootImageSize), reject)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	n, err := io.Copy(out, io.LimitReader(in, manifests.MaxBootImageSize+1))
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, src, err)
	}
	if n > manifests.MaxBootImageSize {
		return fmt.Errorf("%s %s is over %d bytes: %w", what, src, int64(manifests.MaxBootImageSize), reject)
	}
	return nil
}

// SignLoader signs systemd-boot (bootEFI, "": DefaultBootEFI) with the
// db key s into out: the boot loader of a disk provisioned from a boot
// image (Options.SignedLoader), made where the key is. out is written
// whole or not at all.
func SignLoader(ctx context.Context, bootEFI, out string, s *secureboot.Signer) error {
	if bootEFI == "" {
		bootEFI = DefaultBootEFI
	}
	scr, err := scratch.MkdirTemp("sign-loader")
	if err != nil {
		return fmt.Errorf("signing %s: %w", bootEFI, err)
	}
	defer scr.RemoveAll()
	signed := filepath.Join(scr.Path, "systemd-boot.signed.efi")
	if err := s.Sign(ctx, bootEFI, signed); err != nil {
		return fmt.Errorf("secure boot: %w", err)
	}
	raw, err := os.ReadFile(signed)
	if err != nil {
		return fmt.Errorf("signing %s: %w", bootEFI, err)
	}
	if err := safefile.WriteAtomic(out, raw, 0o644); err != nil {
		return fmt.Errorf("signing %s: %w", bootEFI, err)
	}
	return nil
}

// presignedBoot checks a boot image (for b's root hash) and a signed
// boot loader, copied into work, for a disk that boots them: both
// signed, naming a common signer, the boot image's command line exactly
// the one for this image.
func presignedBoot(b *bootFiles, bootImage, loader, work string) (*signedBoot, error) {
	if bootImage == "" || loader == "" {
		return nil, fmt.Errorf("a disk provisioned without the db key needs both the image's boot image and a signed boot loader: %w", ErrSecureBoot)
	}
	if b.kernel == "" {
		return nil, fmt.Errorf("secure boot: the image has no kernel and initrd: %w", ErrNoKernel)
	}
	if b.verity == nil {
		return nil, fmt.Errorf("secure boot: the image has no verity record (or no strata to open its root with), and a boot image finds and opens its root by the signed root hash: %w", ErrSecureBoot)
	}
	out := &signedBoot{uki: filepath.Join(work, "boot-image.efi"), bootEFI: filepath.Join(work, "loader.signed.efi")}
	if err := copyBootImage(bootImage, out.uki); err != nil {
		return nil, err
	}
	if _, err := uki.CheckBootImage(out.uki, b.verity.rootHash); err != nil {
		return nil, fmt.Errorf("%s: %w", bootImage, err)
	}
	if err := copyEFI("signed boot loader", ErrSecureBoot, loader, out.bootEFI); err != nil {
		return nil, err
	}
	ukiSigners, err := fileSigners(out.uki)
	if err != nil {
		return nil, fmt.Errorf("boot image %s: %w: %w", bootImage, manifests.ErrBootImage, err)
	}
	loaderSigners, err := fileSigners(out.bootEFI)
	if err != nil {
		return nil, fmt.Errorf("signed boot loader %s: %w: %w", loader, ErrSecureBoot, err)
	}
	for _, l := range loaderSigners {
		for _, u := range ukiSigners {
			if l.Equal(u) {
				out.signer = u.Subject.String()
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("the boot loader %s is signed by %s and the boot image %s by %s: the firmware would need both in db; sign both with the db key the machines trust: %w",
		loader, loaderSigners[0].Subject, bootImage, ukiSigners[0].Subject, ErrSecureBoot)
}
