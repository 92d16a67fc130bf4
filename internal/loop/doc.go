// Package loop attaches files (or parts of them) to fresh loop devices
// and mounts them.
//
// Each mount gets a device of its own, configured in one LOOP_CONFIGURE
// ioctl (backing file, offset, size limit, read-only, autoclear) rather
// than `mount -o loop`, which would reuse a device already backed by the
// same file. Autoclear makes the kernel detach the device when its last
// user goes: after Mount, that is the mount itself, so unmounting it —
// or the end of the mount namespace that holds it — frees the device.
package loop
