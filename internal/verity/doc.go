// Package verity computes and checks dm-verity hash trees: format 1 with
// SHA-256, the form `veritysetup format` writes and the kernel's
// dm-verity target reads.
//
// A tree is a Merkle tree over fixed-size data blocks. Level 0 holds the
// salted digest of every data block, each further level the digests of
// the blocks of the level below, until one block is left; the root hash
// is the digest of that block. On disk the levels are stored top level
// first, each hash block zero-padded, starting at a hash offset. strata
// appends the tree to the image file it covers (Append), so one file
// carries both, and records the parameters and the root hash in a signed
// document; there is no veritysetup superblock.
//
// Verify checks a tree the way the kernel does on read, top down from
// the root hash, and names the first block that does not match.
package verity
