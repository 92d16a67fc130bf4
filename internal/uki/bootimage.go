package uki

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// CheckBootImage checks that the kernel image at p is a boot image of an
// image whose root hash is rootHash, and returns what it read of it: a signed UKI whose command line
// passes manifests.CheckBootImageCmdline. Whether the firmware trusts
// its signer is the firmware's to say.
func CheckBootImage(p, rootHash string) (*Info, error) {
	// Never opened for reading unless it is a regular file: a FIFO would
	// block, a device never end.
	f, err := safefile.OpenFollow(p)
	if err != nil {
		return nil, fmt.Errorf("boot image: %w: %w", manifests.ErrBootImage, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("boot image: %w", err)
	}
	if fi.Size() > manifests.MaxBootImageSize {
		return nil, fmt.Errorf("boot image %s is %d bytes (at most %d): %w", p, fi.Size(), int64(manifests.MaxBootImageSize), manifests.ErrBootImage)
	}
	head := make([]byte, min(fi.Size(), HeadSize))
	if _, err := io.ReadFull(f, head); err != nil {
		return nil, fmt.Errorf("boot image %s: %w", p, err)
	}
	info, err := ReadInfo(bytes.NewReader(head), int64(len(head)))
	if err != nil {
		return nil, fmt.Errorf("boot image %s: %w: %w", p, manifests.ErrBootImage, err)
	}
	if !info.Signed {
		return nil, fmt.Errorf("boot image %s is not signed: %w", p, manifests.ErrBootImage)
	}
	if err := manifests.CheckBootImageCmdline(info.Cmdline, rootHash); err != nil {
		return nil, fmt.Errorf("boot image %s: %w", filepath.Base(p), err)
	}
	return info, nil
}
