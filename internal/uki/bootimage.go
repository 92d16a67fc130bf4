package uki

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// OpenError is the error for a boot image that could not be opened or
// read (err): a rejection (manifests.ErrBootImage) when what is there is
// not a regular file or is too large, err as it is otherwise. A missing or
// unreadable file is the operator's to fix, not a bad boot image.
func OpenError(err error) error {
	if errors.Is(err, safefile.ErrNotRegular) || errors.Is(err, safefile.ErrTooLarge) {
		return fmt.Errorf("boot image: %w: %w", manifests.ErrBootImage, err)
	}
	return fmt.Errorf("boot image: %w", err)
}

// CheckBootImage checks that the kernel image at p is a boot image of an
// image whose root hash is rootHash, and returns what it read of it: a signed UKI whose command line
// passes manifests.CheckBootImageCmdline. Whether the firmware trusts
// its signer is the firmware's to say.
func CheckBootImage(p, rootHash string) (*Info, error) {
	// Never opened for reading unless it is a regular file: a FIFO would
	// block, a device never end.
	f, err := safefile.OpenFollow(p)
	if err != nil {
		return nil, OpenError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("boot image: %w", err)
	}
	return CheckBootImageAt(p, f, fi.Size(), rootHash)
}

// CheckBootImageAt is CheckBootImage of the size bytes of r (name names
// it in errors): what was read into memory is checked as it is.
func CheckBootImageAt(name string, r io.ReaderAt, size int64, rootHash string) (*Info, error) {
	if size > manifests.MaxBootImageSize {
		return nil, fmt.Errorf("boot image %s is %d bytes (at most %d): %w", name, size, int64(manifests.MaxBootImageSize), manifests.ErrBootImage)
	}
	head := make([]byte, min(size, HeadSize))
	if _, err := r.ReadAt(head, 0); err != nil && !(errors.Is(err, io.EOF) && int64(len(head)) == size) {
		return nil, fmt.Errorf("boot image %s: %w", name, err)
	}
	info, err := ReadInfo(bytes.NewReader(head), int64(len(head)))
	if err != nil {
		return nil, fmt.Errorf("boot image %s: %w: %w", name, manifests.ErrBootImage, err)
	}
	if !info.Signed {
		return nil, fmt.Errorf("boot image %s is not signed: %w", name, manifests.ErrBootImage)
	}
	if err := manifests.CheckBootImageCmdline(info.Cmdline, rootHash); err != nil {
		return nil, fmt.Errorf("boot image %s: %w", filepath.Base(name), err)
	}
	return info, nil
}
