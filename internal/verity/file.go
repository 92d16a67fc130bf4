package verity

import (
	"context"
	"fmt"
	"os"

	"github.com/strata-dev/strata/internal/safefile"
)

// Append pads the file f to a whole number of BlockSize blocks with
// zeros, computes the hash tree of everything in it, and writes the tree
// right after the data. It returns the tree; its Params say where the
// data ends and the tree starts. A squashfs image ignores bytes after its
// own end, so the file still mounts as before and also opens as a
// dm-verity device with itself as both data and hash device.
func Append(ctx context.Context, f *os.File, salt []byte) (*Tree, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("hashing %s: %w", f.Name(), err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("hashing %s: %w: not a regular file", f.Name(), ErrParams)
	}
	size := fi.Size()
	if size == 0 {
		return nil, fmt.Errorf("hashing %s: %w: empty file", f.Name(), ErrParams)
	}
	if r := size % BlockSize; r != 0 {
		size += BlockSize - r
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("padding %s: %w", f.Name(), err)
		}
	}
	p := Params{DataBlockSize: BlockSize, HashBlockSize: BlockSize, DataBlocks: size / BlockSize, HashOffset: size, Salt: salt}
	t, err := Compute(ctx, f, p)
	if err != nil {
		return nil, fmt.Errorf("hashing %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(t.Hash, p.HashOffset); err != nil {
		return nil, fmt.Errorf("writing the hash tree of %s: %w", f.Name(), err)
	}
	return t, nil
}

// VerifyFile checks a file that carries its own tree, as Append wrote it,
// against root.
func VerifyFile(ctx context.Context, path string, p Params, root []byte) error {
	f, err := safefile.OpenFollow(path)
	if err != nil {
		return fmt.Errorf("verifying %s: %w", path, err)
	}
	defer f.Close()
	if err := Verify(ctx, f, f, p, root); err != nil {
		return fmt.Errorf("verifying %s: %w", path, err)
	}
	return nil
}
