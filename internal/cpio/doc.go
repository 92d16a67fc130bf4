// Package cpio writes the "newc" cpio archives a Linux kernel unpacks as
// an initramfs (Documentation/driver-api/early-userspace/buffer-format):
// regular files and directories, numeric owners, a fixed time, so that
// the same files always give the same bytes. Several archives
// concatenated are one initramfs; the boot loader loads each as an
// initrd.
package cpio
