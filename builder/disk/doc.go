// Package disk writes bootable node disks from signed strata images.
//
// Provision lays out a GPT disk (a raw image file or a block device) with
// four partitions (see Layout): an EFI system partition with systemd-boot
// and, when the image has one, its kernel, initrd and a loader entry; root
// A holding the squashfs image byte for byte; an empty root B of the same
// size for a later full-image update; and an ext4 state partition with the
// node's ledger and identity. The image is verified against its signed
// manifest as it streams (builder.WalkImage) before anything is written,
// and the bytes copied to root A must hash the same as the bytes verified.
// The same image and node id always give the same partition table.
//
// The partition table is written with go-diskfs; the ESP and the state
// file system are made with mkfs.fat, mtools and mkfs.ext4, whose writers
// fsck accepts.
//
// # Offline disks
//
// MountNode mounts the node of a provisioned disk that is not running the
// way its initramfs does at boot — root A's squashfs read-only, the state
// partition read-write with its var bound on the root's var, a tmpfs on
// run; the node engine then activates it — each partition on a fresh loop
// device (package internal/loop) found from the GPT. Package
// overlay/offline applies and audits through the node handle on that
// root; restarts are recorded as pending, since nothing runs on the disk. The disk is held
// with an exclusive lock (a running qemu's image lock conflicts with it)
// and a block device must not be mounted. All of it must run in a
// private mount namespace, so that no mount outlives the process: Reexec
// runs the executable again in one, and MountNode refuses to run
// anywhere else (ErrNotPrivate).
package disk
