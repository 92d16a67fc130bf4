// Package builder turns recipes into images and folds overlay chains into
// fresh images.
//
// An image is assembled as a tree state (entries plus where each file's
// content comes from): a base (a host directory, a root file system
// tarball, another strata image, or a cached debootstrap root), then the
// recipe's files, removals and steps (copies, removals, and commands run
// inside the tree with chroot, whose result is cached), then the strata
// binary and units. Its service catalog is computed from that tree, its
// manifest is signed, and the tree streams as a deterministic tar into
// `mksquashfs - OUT -tar`. Directory, tarball and image bases need neither
// root nor network; debootstrap and run steps need root, and network only
// until their results are cached. The same recipe with the same cache
// always gives the same bytes.
package builder
