package nodestate

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

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Errors reported by this package.
var (
	// ErrLocked reports that another strata process holds the node lock.
	ErrLocked = errors.New("node: locked by another strata process")
	// ErrNotNode reports a root that is no node: missing, not a
	// directory, without a state directory or a ledger (of the
	// manifests.ErrRejected class: the root given is not one strata can
	// act on).
	ErrNotNode = manifests.Rejection("node: not a strata node")
	// ErrBadState reports node state planted as something it must not be
	// (a symlink where a directory or file belongs).
	ErrBadState = manifests.Rejection("node: state directory tampered with")
	// ErrBadLock reports a lock file that is not a regular file of its
	// own (a symlink, a FIFO, a hard link to a file elsewhere).
	ErrBadLock = manifests.Rejection("lock file tampered with")
)

// Node is a node root directory.
type Node struct {
	Root string
}

// Path returns the host path of tree-relative path rel.
func (n Node) Path(rel string) string { return filepath.Join(n.Root, filepath.FromSlash(rel)) }

// StateDir returns the host path of the node state directory.
func (n Node) StateDir() string { return n.Path(manifests.StateDir) }

// stateDirs and stateFiles are what a node's state directory may hold
// under these names; CheckState refuses any of them planted as something
// else (a symlink above all, which would carry writes out of the root).
var (
	stateDirs  = []string{"overlays", "undo", "txn", "layers", "images"}
	stateFiles = []string{"ledger.json", "lock", "backend", "restarting", "image.json.minisig", "index-serial", "upgrade.json", "identity.key"}
)

// CheckState refuses a node whose state directory is reached through a
// symlink (or is not a directory), or whose state directories and files
// are not what they should be: state, journals and undo data must stay
// inside the root, whatever the node's tree holds.
func (n Node) CheckState() error {
	if fi, err := os.Stat(n.Root); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node %s: no such directory: %w", n.Root, ErrNotNode)
	} else if err != nil {
		return fmt.Errorf("node %s: %w", n.Root, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("node %s: not a directory: %w", n.Root, ErrNotNode)
	}
	parts := strings.Split(manifests.StateDir, "/")
	for i := range parts {
		rel := strings.Join(parts[:i+1], "/")
		fi, err := os.Lstat(n.Path(rel))
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node %s: /%s missing: %w", n.Root, rel, ErrNotNode)
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Root, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("node %s: /%s is not a directory (%s): %w", n.Root, rel, TypeName(fi.Mode()), ErrBadState)
		}
	}
	check := func(name string, want os.FileMode) error {
		p := filepath.Join(n.StateDir(), name)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Root, err)
		}
		if fi.Mode().Type() != want {
			what := "a directory"
			if want != os.ModeDir {
				what = "a regular file"
			}
			return fmt.Errorf("node %s: %s is not %s (%s): %w", n.Root, p, what, TypeName(fi.Mode()), ErrBadState)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && want == 0 && st.Nlink != 1 {
			return fmt.Errorf("node %s: %s has %d hard links (a link to a file elsewhere): %w", n.Root, p, st.Nlink, ErrBadState)
		}
		return nil
	}
	for _, d := range stateDirs {
		if err := check(d, os.ModeDir); err != nil {
			return err
		}
	}
	for _, f := range stateFiles {
		if err := check(f, 0); err != nil {
			return err
		}
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

// ReadLedger reads and structurally checks the ledger.
func (n Node) ReadLedger() (*manifests.Ledger, error) {
	if err := n.CheckState(); err != nil {
		return nil, err
	}
	p := n.Path(manifests.LedgerPath)
	b, err := safefile.Read(p, manifests.MaxManifestSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading ledger %s: no ledger: %w", p, ErrNotNode)
	}
	if err != nil {
		return nil, fmt.Errorf("reading ledger: %w", err)
	}
	var l manifests.Ledger
	if err := manifests.Decode(b, &l); err != nil {
		return nil, fmt.Errorf("reading ledger %s: %w", p, err)
	}
	if err := l.CheckChain(); err != nil {
		return nil, fmt.Errorf("reading ledger %s: %w", p, err)
	}
	return &l, nil
}

// WriteLedger replaces the ledger atomically (write, fsync, rename, fsync
// of the directory). The rename is the commit point of an apply.
func (n Node) WriteLedger(l *manifests.Ledger) error {
	b, err := manifests.Encode(l)
	if err != nil {
		return err
	}
	return WriteFileAtomic(n.Path(manifests.LedgerPath), b, 0o644)
}

// ImageManifest reads the image manifest the node's tree carries.
func (n Node) ImageManifest() (*manifests.ImageManifest, []byte, error) {
	p := n.Path(manifests.ImageManifestPath)
	b, err := safefile.Read(p, manifests.MaxManifestSize)
	if err != nil {
		return nil, nil, fmt.Errorf("reading image manifest: %w", err)
	}
	var m manifests.ImageManifest
	if err := manifests.Decode(b, &m); err != nil {
		return nil, nil, fmt.Errorf("reading image manifest %s: %w", p, err)
	}
	return &m, b, nil
}

// TrustedKeys loads the public keys in the node's key directory.
func (n Node) TrustedKeys() (*sign.KeySet, error) {
	return sign.LoadDir(n.Path(manifests.KeysDir))
}

// Lock takes the node's exclusive apply lock, waiting up to wait for a
// holder to finish (zero: fail at once). The returned function releases it.
func (n Node) Lock(ctx context.Context, wait time.Duration) (func(), error) {
	if err := n.CheckState(); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(n.Path(manifests.LedgerPath)); err != nil {
		return nil, fmt.Errorf("locking node %s: no ledger: %w", n.Root, ErrNotNode)
	}
	if n.ReadOnly() {
		// A state mounted read-only (an offline disk checked before
		// anything is written): nothing can change it, and the lock
		// file cannot be written; the disk itself is held by its
		// opener.
		return func() {}, nil
	}
	unlock, err := FileLock(ctx, filepath.Join(n.StateDir(), "lock"), wait)
	switch {
	case errors.Is(err, ErrBadLock):
		return nil, fmt.Errorf("locking node %s: %w: %w", n.Root, err, ErrBadState)
	case errors.Is(err, ErrLocked):
		return nil, fmt.Errorf("locking node %s: %w", n.Root, err)
	}
	return unlock, err
}

// ReadOnly reports whether the node's state directory is on a file
// system mounted read-only.
func (n Node) ReadOnly() bool {
	var st unix.Statfs_t
	return unix.Statfs(n.StateDir(), &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// FileLock takes an exclusive flock on path (created if missing), waiting
// up to wait for the holder (zero: fail at once with ErrLocked, naming the
// holder's pid). The returned function releases it.
func FileLock(ctx context.Context, path string, wait time.Duration) (func(), error) {
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
			holder, _ := safefile.Read(path, 32)
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

// WriteFileAtomic writes data to path through a temporary file in the same
// directory, fsyncs it, renames it into place and fsyncs the directory.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
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
