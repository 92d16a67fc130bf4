package safefile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/manifests"
)

// Errors of Lock.
var (
	// ErrLocked reports that another strata process holds the lock.
	ErrLocked = errors.New("locked by another strata process")
	// ErrBadLock reports a lock file that is not a regular file of its
	// own (a symlink, a FIFO, a hard link to a file elsewhere).
	ErrBadLock = manifests.Rejection("lock file tampered with")
)

// Lock takes an exclusive flock on path (created if missing), waiting
// up to wait for the holder (zero: fail at once with ErrLocked, naming the
// holder's pid). The returned function releases it.
func Lock(ctx context.Context, path string, wait time.Duration) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("locking %s: it is a symlink: %w", path, ErrBadLock)
	}
	if err != nil {
		return nil, fmt.Errorf("locking: %w", err)
	}
	// The lock file is written (the holder's pid): it must be a file of
	// its own, not a FIFO, a device or a hard link to a file elsewhere.
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	var links uint64 = 1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		links = uint64(st.Nlink)
	}
	if !fi.Mode().IsRegular() || links != 1 {
		f.Close()
		return nil, fmt.Errorf("locking %s: it is a %s with %d links, not a regular file of its own: %w", path, TypeName(fi.Mode()), links, ErrBadLock)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			holder, _ := Read(path, 32)
			f.Close()
			return nil, fmt.Errorf("%w (pid %s holds %s)", ErrLocked, strings.TrimSpace(string(holder)), path)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// WriteAtomic writes data to path through a temporary file in the same
// directory, fsyncs it, renames it into place and fsyncs the directory.
func WriteAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so renames in it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// SyncFS flushes the whole file system holding dir (syncfs(2)): one call
// makes every earlier write and rename on it durable.
func SyncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// TypeName names the kind of file m describes, for messages: "symlink",
// "directory", "FIFO", "device", "socket", "regular file".
func TypeName(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	case m.IsRegular():
		return "regular file"
	}
	return m.Type().String()
}
