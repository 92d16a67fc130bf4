package nodestate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	ErrLocked = safefile.ErrLocked
	// ErrNotNode reports a root that is no node: missing, not a
	// directory, without a state directory or a ledger (of the
	// manifests.ErrRejected class: the root given is not one strata can
	// act on).
	ErrNotNode = manifests.Rejection("not a strata node")
	// ErrBadState reports node state planted as something it must not be
	// (a symlink where a directory or file belongs).
	ErrBadState = manifests.Rejection("state directory tampered with")
	// ErrBadLock reports a lock file that is not a regular file of its
	// own (a symlink, a FIFO, a hard link to a file elsewhere).
	ErrBadLock = safefile.ErrBadLock
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
			return fmt.Errorf("node %s: /%s is not a directory (%s): %w", n.Root, rel, safefile.TypeName(fi.Mode()), ErrBadState)
		}
	}
	check := func(name string, want os.FileMode) error {
		p := filepath.Join(n.StateDir(), name)
		fi, err := os.Lstat(p)
		// A file replaced by an atomic write (rename) while it was looked
		// up shows the old inode, with no link left: look again.
		for try := 0; try < 3 && err == nil && nlink(fi) == 0; try++ {
			fi, err = os.Lstat(p)
		}
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
			return fmt.Errorf("node %s: %s is not %s (%s): %w", n.Root, p, what, safefile.TypeName(fi.Mode()), ErrBadState)
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

// nlink is fi's link count (1 where the system does not say).
func nlink(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
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
	return safefile.WriteAtomic(n.Path(manifests.LedgerPath), b, 0o644)
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
	unlock, err := safefile.Lock(ctx, filepath.Join(n.StateDir(), "lock"), wait)
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
