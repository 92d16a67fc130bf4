// Package builder turns recipes into images and folds overlay chains into
// fresh images.
//
// An image is assembled as a tree state (entries plus where each file's
// content comes from), its service catalog is computed from that tree, its
// manifest is signed, and the tree streams as a deterministic tar into
// `mksquashfs - OUT -tar`. Nothing needs root, and the same recipe always
// gives the same bytes.
package builder
