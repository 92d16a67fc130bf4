package safefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoTempDir reports that none of the directories offered for
// temporary files could be reached without following a symbolic link.
var ErrNoTempDir = errors.New("no temporary directory reachable without a symbolic link")

// openDir opens the directory dir (O_PATH) only if no component of its
// path is a symbolic link: a link planted at /var/tmp (or in a node root
// on the way to it) is refused, not followed.
func openDir(dir string) (int, error) {
	if !filepath.IsAbs(dir) {
		return -1, fmt.Errorf("temporary directory %s: not an absolute path", dir)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, filepath.Clean(dir), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: dir, Err: err}
	}
	return fd, nil
}

// firstDir opens the first of dirs reachable without a symbolic link.
func firstDir(dirs []string) (int, string, error) {
	var errs []error
	for _, d := range dirs {
		fd, err := openDir(d)
		if err == nil {
			return fd, filepath.Clean(d), nil
		}
		errs = append(errs, err)
	}
	return -1, "", fmt.Errorf("%w: %w", ErrNoTempDir, errors.Join(errs...))
}

// MkdirTemp makes a new directory (mode 0700, a random name starting
// with prefix) in the first of dirs that is reachable without following
// a symbolic link, and returns its path. A directory in a node's tree
// (whose links a signed overlay may have planted) is safe to offer: a
// link anywhere on the way to it is refused, not followed.
func MkdirTemp(dirs []string, prefix string) (string, error) {
	fd, dir, err := firstDir(dirs)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	for range 16 {
		name := prefix + random()
		err := unix.Mkdirat(fd, name, 0o700)
		if err == nil {
			return filepath.Join(dir, name), nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", &os.PathError{Op: "mkdir", Path: filepath.Join(dir, name), Err: err}
		}
	}
	return "", fmt.Errorf("temporary directory in %s: no free name", dir)
}

// CreateTemp opens a new, unnamed file for reading and writing in the
// first of dirs reachable without following a symbolic link (O_TMPFILE:
// it has no name, so nothing is left behind however the process ends).
// On a file system without O_TMPFILE the file gets a random name and is
// unlinked at once.
func CreateTemp(dirs []string) (*os.File, error) {
	fd, dir, err := firstDir(dirs)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// O_PATH descriptors take no O_TMPFILE: reopen the directory itself.
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	f, err := unix.Openat(dfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(f), filepath.Join(dir, "(unnamed)")), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) {
		return nil, &os.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
	}
	name := ".strata-" + random()
	f, err = unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: filepath.Join(dir, name), Err: err}
	}
	if err := unix.Unlinkat(dfd, name, 0); err != nil {
		unix.Close(f)
		return nil, &os.PathError{Op: "unlink", Path: filepath.Join(dir, name), Err: err}
	}
	return os.NewFile(uintptr(f), filepath.Join(dir, name)), nil
}

func random() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// MkdirAll makes the directory path and its missing parents (mode perm),
// refusing a symbolic link at any component instead of following it.
func MkdirAll(path string, perm os.FileMode) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("making %s: not an absolute path", path)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: "/", Err: err}
	}
	at := "/"
	for _, name := range strings.Split(strings.Trim(filepath.Clean(path), "/"), "/") {
		if name == "" {
			continue
		}
		at = filepath.Join(at, name)
		if err := unix.Mkdirat(fd, name, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return &os.PathError{Op: "mkdir", Path: at, Err: err}
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "open", Path: at, Err: fmt.Errorf("not a directory, or a symbolic link: %w", err)}
		}
		fd = next
	}
	unix.Close(fd)
	return nil
}
