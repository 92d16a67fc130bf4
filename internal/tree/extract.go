package tree

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/manifests"
)

// Create makes the object e describes at host path p, which must not exist:
// a file with content from r (checked against e.SHA256 when set), a
// directory, or a symlink; then sets owner and mode (in that order, so
// setuid bits survive). Directory modes are applied even when they forbid
// writing, since strata runs as root.
func Create(p string, e manifests.Entry, r io.Reader) error {
	return CreateAt(unix.AT_FDCWD, p, e, r)
}

// CreateAt is Create relative to the directory open as dirfd: with a
// single-component name, nothing outside that directory can be touched,
// whatever symlinks lie around it.
func CreateAt(dirfd int, name string, e manifests.Entry, r io.Reader) error {
	switch e.Type {
	case manifests.TypeDir:
		if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", name, &os.PathError{Op: "mkdir", Path: name, Err: err})
		}
	case manifests.TypeSymlink:
		if err := unix.Symlinkat(e.Target, dirfd, name); err != nil {
			return fmt.Errorf("creating %s: %w", name, &os.PathError{Op: "symlink", Path: name, Err: err})
		}
	case manifests.TypeFile:
		return writeFile(dirfd, name, e, r)
	default:
		return fmt.Errorf("creating %s: type %q: %w", name, e.Type, ErrSpecialFile)
	}
	return SetMetaAt(dirfd, name, e)
}

// SetMeta sets owner and mode of the file or directory at p to e's (owner
// only for a symlink).
func SetMeta(p string, e manifests.Entry) error {
	return SetMetaAt(unix.AT_FDCWD, p, e)
}

// SetMetaAt is SetMeta for name relative to the directory open as dirfd.
// A final symlink is never followed.
func SetMetaAt(dirfd int, name string, e manifests.Entry) error {
	if err := unix.Fchownat(dirfd, name, e.UID, e.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting owner of %s: %w", name, &os.PathError{Op: "chown", Path: name, Err: err})
	}
	if e.Type == manifests.TypeSymlink {
		return nil
	}
	if err := unix.Fchmodat(dirfd, name, chmodBits(e.Mode), 0); err != nil {
		return fmt.Errorf("setting mode of %s: %w", name, &os.PathError{Op: "chmod", Path: name, Err: err})
	}
	return nil
}

// chmodBits returns m as chmod(2) wants it, setuid, setgid and sticky
// included.
func chmodBits(m manifests.Mode) uint32 { return uint32(m) & 07777 }

// writeFile creates the file with raw system calls (no poller
// registration, owner and mode set on the descriptor): applying an overlay
// writes many small files, and this is its hot path.
func writeFile(dirfd int, p string, e manifests.Entry, r io.Reader) (err error) {
	fd, err := unix.Openat(dirfd, p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", p, &os.PathError{Op: "open", Path: p, Err: err})
	}
	defer func() {
		if cerr := unix.Close(fd); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", p, cerr)
		}
	}()
	h := sha256.New()
	n, err := ctxio.Copy(fdWriter(fd), io.TeeReader(r, h))
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	if n != e.Size {
		return fmt.Errorf("writing %s: %d bytes, expected %d", p, n, e.Size)
	}
	if e.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return fmt.Errorf("writing %s: content does not match sha256 %s", p, e.SHA256)
	}
	if err := unix.Fchown(fd, e.UID, e.GID); err != nil {
		return fmt.Errorf("setting owner of %s: %w", p, err)
	}
	if err := unix.Fchmod(fd, chmodBits(e.Mode)); err != nil {
		return fmt.Errorf("setting mode of %s: %w", p, err)
	}
	return nil
}

// fdWriter writes to a raw file descriptor.
type fdWriter int

func (w fdWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Write(int(w), b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}
