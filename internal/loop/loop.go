package loop

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Config says which part of the backing file a device shows and how.
type Config struct {
	// Offset is where the device starts in the file, in bytes.
	Offset int64
	// SizeLimit is the device's size in bytes (0: up to the file's end).
	SizeLimit int64
	// ReadOnly makes the device read-only (the file is opened read-only).
	ReadOnly bool
}

// tries bounds the races with other processes taking the free device.
const tries = 20

// Mount attaches file (the range cfg gives) to a fresh loop device with
// autoclear and mounts it on dir as fstype with flags and data
// (MS_RDONLY is added for a read-only device). It returns the device; the
// mount is its only user, so unmounting it detaches the device.
func Mount(file string, cfg Config, dir, fstype string, flags uintptr, data string) (string, error) {
	dev, f, err := Attach(file, cfg)
	if err != nil {
		return "", err
	}
	if cfg.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	err = unix.Mount(dev, dir, fstype, flags, data)
	f.Close() // the mount (if any) is now the device's last user
	if err != nil {
		return "", fmt.Errorf("mounting %s (%s, %s) on %s: %w", file, dev, fstype, dir, err)
	}
	return dev, nil
}

// Attach configures a free loop device for cfg's range of file and
// returns it open: with autoclear, the device is detached once this
// descriptor and every other user (a mount, a device-mapper table) are
// gone.
func Attach(file string, cfg Config) (string, *os.File, error) {
	if cfg.Offset < 0 || cfg.SizeLimit < 0 {
		return "", nil, fmt.Errorf("attaching %s: negative offset or size limit", file)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("attaching %s: %w", file, err)
	}
	defer ctl.Close()
	mode, flags := os.O_RDWR, uint32(unix.LO_FLAGS_AUTOCLEAR)
	if cfg.ReadOnly {
		mode, flags = os.O_RDONLY, flags|unix.LO_FLAGS_READ_ONLY
	}
	backing, err := os.OpenFile(file, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("attaching %s: %w", file, err)
	}
	defer backing.Close()
	for range tries {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("attaching %s: getting a free loop device: %w", file, err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, mode|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", nil, fmt.Errorf("attaching %s: %w", file, err)
		}
		lc := unix.LoopConfig{Fd: uint32(backing.Fd())}
		lc.Info.Flags = flags
		lc.Info.Offset, lc.Info.Sizelimit = uint64(cfg.Offset), uint64(cfg.SizeLimit)
		copy(lc.Info.File_name[:len(lc.Info.File_name)-1], file)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &lc)
		if errors.Is(err, unix.EBUSY) {
			loop.Close() // taken by someone else meanwhile: try the next
			continue
		}
		if err != nil {
			loop.Close()
			return "", nil, fmt.Errorf("attaching %s: configuring %s: %w", file, dev, err)
		}
		return dev, loop, nil
	}
	return "", nil, fmt.Errorf("attaching %s: no free loop device after %d tries", file, tries)
}
