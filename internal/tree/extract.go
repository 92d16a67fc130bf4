package tree

import (
	"sync"

	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"golang.org/x/sys/unix"
	"io"
	"os"

	"github.com/strata-dev/strata/manifests"
)

// Create makes the object e describes at host path p, which must not exist:
// a file with content from r (checked against e.SHA256 when set), a
// directory, or a symlink; then sets owner and mode (in that order, so
// setuid bits survive). Directory modes are applied even when they forbid
// writing, since strata runs as root.
func Create(p string, e manifests.Entry, r io.Reader) error {
	switch e.Type {
	case manifests.TypeDir:
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", p, err)
		}
	case manifests.TypeSymlink:
		if err := os.Symlink(e.Target, p); err != nil {
			return fmt.Errorf("creating %s: %w", p, err)
		}
		if err := os.Lchown(p, e.UID, e.GID); err != nil {
			return fmt.Errorf("creating %s: %w", p, err)
		}
		return nil
	case manifests.TypeFile:
		return writeFile(p, e, r)
	default:
		return fmt.Errorf("creating %s: type %q: %w", p, e.Type, ErrSpecialFile)
	}
	return SetMeta(p, e)
}

// SetMeta sets owner and mode of the file or directory at p to e's.
func SetMeta(p string, e manifests.Entry) error {
	if err := os.Lchown(p, e.UID, e.GID); err != nil {
		return fmt.Errorf("setting owner of %s: %w", p, err)
	}
	if err := os.Chmod(p, FileMode(e.Mode)); err != nil {
		return fmt.Errorf("setting mode of %s: %w", p, err)
	}
	return nil
}

// writeFile creates the file with raw system calls (no poller
// registration, owner and mode set on the descriptor): applying an overlay
// writes many small files, and this is its hot path.
func writeFile(p string, e manifests.Entry, r io.Reader) (err error) {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", p, &os.PathError{Op: "open", Path: p, Err: err})
	}
	defer func() {
		if cerr := unix.Close(fd); err == nil && cerr != nil {
			err = fmt.Errorf("writing %s: %w", p, cerr)
		}
	}()
	h := sha256.New()
	buf := copyBuf.Get().(*[]byte)
	defer copyBuf.Put(buf)
	n, err := io.CopyBuffer(fdWriter(fd), io.TeeReader(r, h), *buf)
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
	if err := unix.Fchmod(fd, uint32(FileMode(e.Mode).Perm())|specialBits(e.Mode)); err != nil {
		return fmt.Errorf("setting mode of %s: %w", p, err)
	}
	return nil
}

// specialBits returns the setuid, setgid and sticky bits of m as chmod(2)
// wants them.
func specialBits(m manifests.Mode) uint32 { return uint32(m) & 07000 }

var copyBuf = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

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
