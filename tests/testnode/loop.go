package testnode

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mountImage sets up a fresh read-only loop device for image (never one
// shared with another node, which mount -o loop would reuse for the same
// file) with autoclear, so the kernel detaches it when the mount goes
// with the node's mount namespace, and mounts it on dir. It returns the
// loop device.
func mountImage(image, dir string) (string, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("mounting %s: %w", image, err)
	}
	defer ctl.Close()
	backing, err := os.Open(image)
	if err != nil {
		return "", fmt.Errorf("mounting %s: %w", image, err)
	}
	defer backing.Close()
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("mounting %s: getting a free loop device: %w", image, err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("mounting %s: %w", image, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			loop.Close() // taken by someone else meanwhile: try the next
			continue
		}
		if err != nil {
			loop.Close()
			return "", fmt.Errorf("mounting %s: configuring %s: %w", image, dev, err)
		}
		// The mount holds the device; closing ours afterwards leaves
		// the mount as its last user.
		err = unix.Mount(dev, dir, "squashfs", unix.MS_RDONLY|unix.MS_NODEV, "")
		loop.Close()
		if err != nil {
			return "", fmt.Errorf("mounting %s (%s) on %s: %w", image, dev, dir, err)
		}
		return dev, nil
	}
	return "", fmt.Errorf("mounting %s: no free loop device after 20 tries", image)
}
