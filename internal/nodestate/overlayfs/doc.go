// Package overlayfs is the node backend for nodes that boot a read-only
// image: each applied overlay is a read-only layer directory in the node's
// state (/var/lib/strata/layers/<version>/), deletions as overlayfs
// whiteouts and opaque directories, and each managed hierarchy (/etc,
// /usr, /opt by default) is an overlayfs stack of the layers in ledger
// order above the image.
//
// The image's own tree is kept reachable under <run>/strata/image (a
// non-recursive clone of the root mount, so the stacks above it do not
// hide it). Activate builds every stack from the ledger; it is what an
// initramfs runs before PID 1 starts. On a running node a change is
// written as a new layer beside the others, and then every affected
// stack is rebuilt aside and slid beneath the one in place
// (move_mount(MOVE_MOUNT_BENEATH)) before the old one is detached, so no
// lookup ever sees a half-built stack. Taking a change back, or rolling
// an overlay back, switches the stacks the same way without its layer.
// The ledger write is the commit point; Recover settles a crash on
// either side of it.
package overlayfs
