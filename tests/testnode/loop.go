package testnode

import (
	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/loop"
)

// mountImage sets up a fresh read-only loop device for image (never one
// shared with another node, which mount -o loop would reuse for the same
// file) with autoclear, so the kernel detaches it when the mount goes
// with the node's mount namespace, and mounts it on dir. It returns the
// loop device.
func mountImage(image, dir string) (string, error) {
	return loop.Mount(image, loop.Config{ReadOnly: true}, dir, "squashfs", unix.MS_NODEV, "")
}
