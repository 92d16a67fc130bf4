// Package layer builds the layer image of an overlay: the overlay's tree
// as overlayfs stacks it (entries, the parent directories the tree after
// it gives them, whiteouts for deletions, opaque directories), written as
// an uncompressed EROFS image (package erofs) with its dm-verity hash
// tree appended (package verity), and what a record of it holds
// (manifests.LayerImage).
//
// The image depends only on the overlay's manifest, the tree after it and
// its payload, so the publisher (overlay create, which signs the record
// into the overlay's manifest) and every node that applies the overlay
// (the overlayfs backend, which mounts it) write the same bytes.
package layer
