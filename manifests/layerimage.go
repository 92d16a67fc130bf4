package manifests

import "fmt"

// LayerFormatEROFS is the one layer image format strata writes.
const LayerFormatEROFS = "erofs"

// LayerImage is what an apply on an overlayfs node recorded of the layer
// image it wrote (layers/<version>.erofs): the file's digest and size,
// and the dm-verity tree appended to it. Activation checks an image
// against it before it mounts the image: by digest, or by root hash when
// the kernel verifies every read (dm-verity). The image is built
// deterministically from the verified overlay and the tree it applies
// to, so every node that applies the same overlay writes the same bytes.
type LayerImage struct {
	Format string `json:"format"`
	// SHA256 and Size are those of the whole file: the image and its
	// tree.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// DataBlocks is the image's length in VerityBlockSize blocks; its
	// tree starts right after them.
	DataBlocks int64 `json:"data_blocks"`
	// Salt and RootHash are the tree's, lower-case hex.
	Salt     string `json:"salt"`
	RootHash string `json:"root_hash"`
}

// Validate checks every field.
func (li *LayerImage) Validate() error {
	if li.Format != LayerFormatEROFS {
		return fmt.Errorf("%w: layer image format %q (strata writes %q)", ErrInvalid, li.Format, LayerFormatEROFS)
	}
	if !lowerHex(li.SHA256, 64, 64) {
		return fmt.Errorf("%w: layer image digest %q is not 64 lower-case hex digits", ErrInvalid, li.SHA256)
	}
	if li.DataBlocks < 1 || li.DataBlocks > MaxVerityBlocks {
		return fmt.Errorf("%w: layer image of %d blocks (1 to %d)", ErrInvalid, li.DataBlocks, MaxVerityBlocks)
	}
	if data := li.DataBlocks * VerityBlockSize; li.Size <= data || li.Size%VerityBlockSize != 0 {
		return fmt.Errorf("%w: layer image size %d does not hold %d data blocks and a tree", ErrInvalid, li.Size, li.DataBlocks)
	}
	if !lowerHex(li.Salt, 0, 2*MaxVeritySalt) {
		return fmt.Errorf("%w: layer image salt %q is not up to %d bytes in lower-case hex", ErrInvalid, li.Salt, MaxVeritySalt)
	}
	if !lowerHex(li.RootHash, 64, 64) {
		return fmt.Errorf("%w: layer image root hash %q is not 64 lower-case hex digits", ErrInvalid, li.RootHash)
	}
	return nil
}
