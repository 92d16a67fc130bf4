package tree

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
		if err := writeFile(p, e, r); err != nil {
			return err
		}
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

func writeFile(p string, e manifests.Entry, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", p, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	if n != e.Size {
		return fmt.Errorf("writing %s: %d bytes, expected %d", p, n, e.Size)
	}
	if e.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return fmt.Errorf("writing %s: content does not match sha256 %s", p, e.SHA256)
	}
	return nil
}
