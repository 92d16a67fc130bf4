package verity

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/strata-dev/strata/manifests"
)

// Append pads the file f to a whole number of BlockSize blocks with
// zeros, computes the hash tree of everything in it, and writes the tree
// right after the data. It returns the tree; its Params say where the
// data ends and the tree starts. A squashfs image ignores bytes after its
// own end, so the file still mounts as before and also opens as a
// dm-verity device with itself as both data and hash device.
func Append(ctx context.Context, f *os.File, salt []byte) (*Tree, error) {
	return AppendHashing(ctx, f, salt, nil)
}

// AppendHashing is Append that also writes the whole file as it ends up,
// data and tree, to whole (a hash, unless nil), in the pass that reads
// the data for the tree: the file's digest without reading it again.
func AppendHashing(ctx context.Context, f *os.File, salt []byte, whole io.Writer) (*Tree, error) {
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
	t, err := compute(ctx, f, p, whole)
	if err != nil {
		return nil, fmt.Errorf("hashing %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(t.Hash, p.HashOffset); err != nil {
		return nil, fmt.Errorf("writing the hash tree of %s: %w", f.Name(), err)
	}
	if whole != nil {
		if _, err := whole.Write(t.Hash); err != nil {
			return nil, fmt.Errorf("hashing %s: %w", f.Name(), err)
		}
	}
	return t, nil
}

// VerifyFile checks a file that carries its own tree, as Append wrote it,
// against root. The caller opens f (as a regular file: a FIFO or a device
// would be read without end).
func VerifyFile(ctx context.Context, f *os.File, p Params, root []byte) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("verifying %s: %w", f.Name(), err)
	}
	// The file must hold the data and the tree before anything is
	// allocated for them.
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("verifying %s: %w", f.Name(), err)
	}
	if need := max(p.DataSize(), p.HashOffset+p.TreeSize()); fi.Size() < need {
		return fmt.Errorf("verifying %s: %w: the file has %d bytes, its data and hash tree need %d", f.Name(), ErrCorrupt, fi.Size(), need)
	}
	if err := Verify(ctx, f, f, p, root); err != nil {
		return fmt.Errorf("verifying %s: %w", f.Name(), err)
	}
	return nil
}

// FromRecord returns the parameters and root hash a validated verity
// record holds.
func FromRecord(v *manifests.Verity) (Params, []byte, error) {
	salt, err := hex.DecodeString(v.Salt)
	if err != nil {
		return Params{}, nil, fmt.Errorf("verity record: salt: %w", err)
	}
	root, err := hex.DecodeString(v.RootHash)
	if err != nil {
		return Params{}, nil, fmt.Errorf("verity record: root hash: %w", err)
	}
	return Params{DataBlockSize: v.DataBlockSize, HashBlockSize: v.HashBlockSize, DataBlocks: v.DataBlocks,
		HashOffset: v.HashOffset, Salt: salt}, root, nil
}

// Record is the verity record of tree t over the image whose manifest
// has line, version and digest image.
func Record(line, version, image string, t *Tree) *manifests.Verity {
	return &manifests.Verity{Schema: manifests.Schema, Kind: manifests.KindVerity, Line: line, Version: version, Image: image,
		Hash: Algorithm, DataBlockSize: t.Params.DataBlockSize, HashBlockSize: t.Params.HashBlockSize,
		DataBlocks: t.Params.DataBlocks, HashOffset: t.Params.HashOffset,
		Salt: hex.EncodeToString(t.Params.Salt), RootHash: t.RootHex()}
}
