// Package imagefile reads and writes root image files through one
// interface, Format, so that the code above it (build, provision,
// regenerate, overlay creation) does not care how an image is stored.
//
// Squashfs is the form strata ships: written by mksquashfs, read back by
// sqfs2tar and rdsquashfs, mounted by the kernel. Tar is a plain,
// uncompressed tar of the same stream, which needs no external tool; it
// exists so that the engine's tests run in seconds on any machine. Only
// Squashfs is recognised unless a program registers Tar (the shared test
// fixture does): a production binary opens nothing but squashfs.
package imagefile
