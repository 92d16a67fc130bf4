package tree

import (
	"archive/tar"
	"io/fs"

	"github.com/strata-dev/strata/manifests"
)

// ModeOf converts fs.FileMode permission and special bits to a
// manifests.Mode (07777).
func ModeOf(m fs.FileMode) manifests.Mode {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 04000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 02000
	}
	if m&fs.ModeSticky != 0 {
		v |= 01000
	}
	return manifests.Mode(v)
}

// FileMode converts a manifests.Mode to fs.FileMode bits for os.Chmod.
func FileMode(m manifests.Mode) fs.FileMode {
	v := fs.FileMode(m & 0777)
	if m&04000 != 0 {
		v |= fs.ModeSetuid
	}
	if m&02000 != 0 {
		v |= fs.ModeSetgid
	}
	if m&01000 != 0 {
		v |= fs.ModeSticky
	}
	return v
}

// Header returns the tar header for e, with fixed times and no user or
// group names, so the same entry always yields the same header bytes.
func Header(e manifests.Entry, mtime int64) *tar.Header {
	h := &tar.Header{
		Name:   e.Path,
		Mode:   int64(e.Mode),
		Uid:    e.UID,
		Gid:    e.GID,
		Format: tar.FormatPAX,
	}
	h.ModTime = unixTime(mtime)
	switch e.Type {
	case manifests.TypeDir:
		h.Typeflag = tar.TypeDir
		h.Name += "/"
	case manifests.TypeSymlink:
		h.Typeflag = tar.TypeSymlink
		h.Linkname = e.Target
	default:
		h.Typeflag = tar.TypeReg
		h.Size = e.Size
	}
	return h
}

// Normalise gives e the owner and mode a file gets when its source says
// nothing trustworthy about them (a checkout, a file added by hand):
// root:root, 0755 for directories and anything with an execute bit, 0644
// for other files, 0777 for symlinks.
func Normalise(e manifests.Entry) manifests.Entry {
	e.UID, e.GID = 0, 0
	switch {
	case e.Type == manifests.TypeSymlink:
		e.Mode = 0777
	case e.Type == manifests.TypeDir || e.Mode&0111 != 0:
		e.Mode = 0755
	default:
		e.Mode = 0644
	}
	return e
}
