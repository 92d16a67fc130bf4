package manifests

import "fmt"

// KindVerity tags an image's verity record.
const KindVerity = "verity"

// VerityBlockSize is the data and hash block size of every tree strata
// writes (the page size), and MaxVeritySalt the longest salt, in bytes,
// veritysetup accepts.
const (
	VerityBlockSize = 4096
	MaxVeritySalt   = 256
	// MaxVerityBlocks bounds an image to 64 GiB of data blocks.
	MaxVerityBlocks = 1 << 24
)

// VerityParam is the kernel command line parameter with which a disk
// node's boot entry names its root hash, and VerityRootDevice the
// device-mapper name its initramfs opens the root as.
const (
	VerityParam      = "strata.verity="
	VerityRootDevice = "strata-root"
)

// Verity is the signed record of an image file's dm-verity hash tree:
// the root hash and every parameter the kernel and veritysetup need to
// open the image as a verified device. It is a document of its own,
// <line>-<version>.verity.json beside the image, because the image
// manifest is also inside the image and cannot hold the hash of the
// bytes that hold it. Image binds the record to one image manifest.
//
// The tree is appended to the image file: the data is the first
// DataBlocks blocks of the file, the tree starts at HashOffset (the end
// of the data), format 1, no superblock.
type Verity struct {
	Schema  int    `json:"schema"`
	Kind    string `json:"kind"`
	Line    string `json:"line"`
	Version string `json:"version"`
	// Image is the digest of the image manifest of the image the tree
	// covers.
	Image string `json:"image"`
	// Hash is the hash algorithm; always "sha256".
	Hash          string `json:"hash"`
	DataBlockSize int    `json:"data_block_size"`
	HashBlockSize int    `json:"hash_block_size"`
	DataBlocks    int64  `json:"data_blocks"`
	HashOffset    int64  `json:"hash_offset"`
	// Salt and RootHash are lower-case hex.
	Salt     string `json:"salt"`
	RootHash string `json:"root_hash"`
}

// Validate checks every field: a record strata would write, for a tree
// appended right after its data.
func (v *Verity) Validate() error {
	if v.Schema != Schema || v.Kind != KindVerity {
		return fmt.Errorf("%w: not a verity record (schema %d, kind %q)", ErrInvalid, v.Schema, v.Kind)
	}
	if err := ValidLine(v.Line); err != nil {
		return err
	}
	if _, err := ParseVersion(v.Version); err != nil {
		return err
	}
	if !ValidDigest(v.Image) {
		return fmt.Errorf("%w: verity record: image digest %q", ErrInvalid, v.Image)
	}
	if v.Hash != "sha256" {
		return fmt.Errorf("%w: verity record: hash %q (strata uses sha256)", ErrInvalid, v.Hash)
	}
	if v.DataBlockSize != VerityBlockSize || v.HashBlockSize != VerityBlockSize {
		return fmt.Errorf("%w: verity record: block sizes %d and %d (strata writes %d)", ErrInvalid, v.DataBlockSize, v.HashBlockSize, VerityBlockSize)
	}
	if v.DataBlocks < 1 || v.DataBlocks > MaxVerityBlocks {
		return fmt.Errorf("%w: verity record: %d data blocks (1 to %d)", ErrInvalid, v.DataBlocks, MaxVerityBlocks)
	}
	if v.HashOffset != v.DataBlocks*int64(v.DataBlockSize) {
		return fmt.Errorf("%w: verity record: hash offset %d is not the end of the data (%d blocks of %d bytes)", ErrInvalid, v.HashOffset, v.DataBlocks, v.DataBlockSize)
	}
	if !lowerHex(v.Salt, 0, 2*MaxVeritySalt) {
		return fmt.Errorf("%w: verity record: salt %q is not up to %d bytes in lower-case hex", ErrInvalid, v.Salt, MaxVeritySalt)
	}
	if !lowerHex(v.RootHash, 64, 64) {
		return fmt.Errorf("%w: verity record: root hash %q is not 64 lower-case hex digits", ErrInvalid, v.RootHash)
	}
	return nil
}

func lowerHex(s string, lo, hi int) bool {
	if len(s) < lo || len(s) > hi || len(s)%2 != 0 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
