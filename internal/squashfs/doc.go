// Package squashfs writes and reads squashfs images through the Debian
// tools: `mksquashfs - OUT -tar` (squashfs-tools 4.5+) builds an image from
// a tar stream without root, `sqfs2tar` (squashfs-tools-ng) streams an
// image back as tar without mounting it, `rdsquashfs --cat` reads one file
// and `unsquashfs -cat` many at once.
package squashfs
