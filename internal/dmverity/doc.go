// Package dmverity maps data that carries a dm-verity hash tree (a root
// image, a layer image) as a kernel dm-verity device, so that the kernel
// checks every block read against a signed root hash and a changed block
// reads as an I/O error.
//
// The mapping is made by veritysetup (cryptsetup), the reference tool,
// with the parameters strata records (no superblock, sha256, 4 KiB
// blocks, the tree right after the data). Verify runs the same
// parameters through `veritysetup verify` in user space, which needs no
// device-mapper: tests prove with it that what a node would map is what
// the publisher hashed.
//
// A mapping made for a mount is closed with deferred removal: the kernel
// removes the device when its last user, the mount, goes, as autoclear
// does for loop devices (package loop).
package dmverity
