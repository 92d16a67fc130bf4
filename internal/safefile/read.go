package safefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotRegular reports a path that is not a regular file (a symlink, a
// directory, a FIFO, a device or a socket).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge reports a file larger than the bound its reader set.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading only if it is a regular file, without
// following a symlink in its last component and without opening anything
// else: the path is first opened with O_PATH (which never calls a device's
// or FIFO's open), checked with fstat, and only then reopened for reading
// through its descriptor, so a swap between check and open is not followed
// either.
func Open(path string) (*os.File, error) {
	return open(path, unix.O_NOFOLLOW)
}

// OpenFollow is Open for a path an operator named, which may be a symlink
// to the file: links are followed, and what they lead to must be a
// regular file.
func OpenFollow(path string) (*os.File, error) {
	return open(path, 0)
}

func open(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return Reopen(fd, path)
}

// Reopen opens for reading the file an O_PATH descriptor fd refers to, if
// it is a regular file (path names it in errors). fd stays open.
func Reopen(fd int, path string) (*os.File, error) {
	if _, err := StatRegular(fd, path); err != nil {
		return nil, err
	}
	rfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(rfd), path), nil
}

// StatRegular is fstat of fd (an O_PATH descriptor will do), refusing
// anything but a regular file (path names it in errors).
func StatRegular(fd int, path string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("reading %s: %w (%s)", path, ErrNotRegular, typeName(st.Mode))
	}
	return st, nil
}

// Read returns the contents of the regular file at path, refusing one
// larger than limit bytes (see Open for what it refuses to open).
func Read(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	return readAll(f, path, limit)
}

// ReadFollow is Read of a path an operator named: a symlink is followed,
// and what it leads to must be a regular file (see OpenFollow).
func ReadFollow(path string, limit int64) ([]byte, error) {
	f, err := OpenFollow(path)
	if err != nil {
		return nil, err
	}
	return readAll(f, path, limit)
}

// ReadBeneath is Read of the slash-separated path rel inside the
// directory root: it is resolved with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), so neither a symlink nor ".." on the way can take
// the read out of root or to another file.
func ReadBeneath(root, rel string, limit int64) ([]byte, error) {
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dfd)
	return readBeneath(dfd, root, rel, limit)
}

// ReadIn is ReadBeneath inside the directory dir opened earlier: a
// directory swapped for a link since it was opened is not followed
// either (a file handed to an editor, read back after it ran).
func ReadIn(dir *os.File, rel string, limit int64) ([]byte, error) {
	return readBeneath(int(dir.Fd()), dir.Name(), rel, limit)
}

func readBeneath(dfd int, root, rel string, limit int64) ([]byte, error) {
	full := root + "/" + rel
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: full, Err: err}
	}
	defer unix.Close(fd)
	f, err := Reopen(fd, full)
	if err != nil {
		return nil, err
	}
	return readAll(f, full, limit)
}

// readAll reads f to its end, up to limit bytes, and closes it.
func readAll(f *os.File, path string, limit int64) ([]byte, error) {
	defer f.Close()
	var buf bytes.Buffer
	fi, err := f.Stat()
	if err == nil && fi.Size() > limit {
		// Refused before a byte is read: a 5 GiB file where a 64 MiB
		// bound holds costs nothing.
		return nil, fmt.Errorf("reading %s: %w (%d bytes, over %d)", path, ErrTooLarge, fi.Size(), limit)
	}
	if err == nil && fi.Size() > 0 {
		buf.Grow(int(fi.Size()) + bytes.MinRead) // the size may change; it only sizes the buffer
	}
	_, err = buf.ReadFrom(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	b := buf.Bytes()
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("reading %s: %w (over %d bytes)", path, ErrTooLarge, limit)
	}
	return b, nil
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
}

// OpenDirBeneath opens (O_PATH) the directory rel below the directory
// open as dfd, resolved with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS): neither a link nor ".." on the way is followed.
// "." or "" is dfd's directory itself.
func OpenDirBeneath(dfd int, rel string) (int, error) {
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
