// Package erofs writes uncompressed EROFS images, byte for byte the same
// for the same tree: strata's layer images. An image is planned from its
// list of nodes (Plan), which fixes every inode, directory block and file
// extent before any content is read; the metadata is written at once
// (WriteMeta) and each file's content at its own offset as it arrives
// (WriteFile), in any order. Two writers given the same nodes and
// contents write the same bytes, whatever order the contents come in.
//
// The format is the kernel's (fs/erofs/erofs_fs.h): 4096-byte blocks,
// the superblock at byte 1024, extended (64-byte) inodes in a metadata
// area from block 1, every file, directory and symbolic link stored flat
// in whole blocks after it (EROFS_INODE_FLAT_PLAIN), no compression, no
// shared xattrs. Timestamps are zero, the volume UUID is zero. What a
// layer needs of overlayfs is there: whiteouts are character devices
// 0:0, and an opaque directory carries trusted.overlay.opaque=y inline.
package erofs
