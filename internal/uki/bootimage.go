package uki

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// CheckBootImage checks that the kernel image at p is a boot image of an
// image whose root hash is rootHash: a signed UKI whose command line
// passes manifests.CheckBootImageCmdline. Whether the firmware trusts
// its signer is the firmware's to say.
func CheckBootImage(p, rootHash string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("boot image %s is not a regular file (%s): %w", p, safefile.TypeName(fi.Mode()), manifests.ErrBootImage)
	}
	if fi.Size() > manifests.MaxBootImageSize {
		return fmt.Errorf("boot image %s is %d bytes (at most %d): %w", p, fi.Size(), int64(manifests.MaxBootImageSize), manifests.ErrBootImage)
	}
	head := make([]byte, min(fi.Size(), HeadSize))
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("boot image %s: %w", p, err)
	}
	info, err := ReadInfo(bytes.NewReader(head), int64(len(head)))
	if err != nil {
		return fmt.Errorf("boot image %s: %w: %w", p, manifests.ErrBootImage, err)
	}
	if !info.Signed {
		return fmt.Errorf("boot image %s is not signed: %w", p, manifests.ErrBootImage)
	}
	if err := manifests.CheckBootImageCmdline(info.Cmdline, rootHash); err != nil {
		return fmt.Errorf("boot image %s: %w", filepath.Base(p), err)
	}
	return nil
}
