package scratch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockName is the lock file in each directory.
const lockName = ".strata-in-use"

// Kinds are the directory kinds Sweep may remove (strata-KIND-*): the
// working directories of commands. strata-edit-* is not among them: a
// failed config edit keeps the operator's copy there on purpose.
var Kinds = []string{"disk", "upgrade", "sandbox", "stage", "config", "fold", "regenerate", "provision", "rollout", "restart", "revert", "validate", "staged"}

// Dir is a working directory in use.
type Dir struct {
	// Path is the directory.
	Path string
	lock *os.File
}

// MkdirTemp makes a new directory strata-KIND-* in the system's temporary
// directory (kind one of Kinds) and locks it as in use until Release.
func MkdirTemp(kind string) (*Dir, error) {
	return MkdirTempIn("", kind)
}

// MkdirTempIn is MkdirTemp in the directory parent ("" for the system's
// temporary directory; Sweep looks there and in /var/tmp and /tmp).
func MkdirTempIn(parent, kind string) (*Dir, error) {
	p, err := os.MkdirTemp(parent, "strata-"+kind+"-")
	if err != nil {
		return nil, err
	}
	d, err := Hold(p)
	if err != nil {
		os.RemoveAll(p)
		return nil, err
	}
	return d, nil
}

// Hold locks dir, a new directory named strata-KIND-* that the caller
// made (somewhere Sweep looks: the system's temporary directory or
// /var/tmp), as in use until Release.
func Hold(dir string) (*Dir, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return &Dir{Path: dir, lock: f}, nil
}

// Release unlocks the directory (it stays: removing it is the caller's).
func (d *Dir) Release() {
	if d != nil && d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
}

// RemoveAll removes the directory and releases it.
func (d *Dir) RemoveAll() error {
	if d == nil {
		return nil
	}
	err := os.RemoveAll(d.Path)
	d.Release()
	return err
}

// Sweep removes from the system's temporary directory, /var/tmp and /tmp
// the strata-KIND-*
// directories (KIND one of Kinds) that this user owns, that were last
// changed more than minAge ago, and whose lock nobody holds (or that
// have none: from a run before locks): what killed runs left behind. It
// returns what it removed; a directory it cannot remove is skipped.
func Sweep(minAge time.Duration) ([]string, error) {
	var removed []string
	var errs []error
	for _, tmp := range sweepDirs() {
		ents, err := os.ReadDir(tmp)
		if err != nil {
			continue // no /var/tmp, say
		}
		for _, e := range ents {
			if !e.IsDir() || !ours(e.Name()) {
				continue
			}
			p := filepath.Join(tmp, e.Name())
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != os.Geteuid() {
				continue
			}
			if time.Since(time.Unix(st.Mtim.Unix())) < minAge || held(p) {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepDirs are where strata makes working directories: the system's
// temporary directory, /var/tmp (spools for upgrades) and /tmp (sandbox
// views when $TMPDIR is private).
func sweepDirs() []string {
	dirs := []string{filepath.Clean(os.TempDir())}
	for _, d := range []string{"/var/tmp", "/tmp"} {
		if d != dirs[0] {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func ours(name string) bool {
	for _, k := range Kinds {
		if strings.HasPrefix(name, "strata-"+k+"-") {
			return true
		}
	}
	return false
}

// held reports whether a live process holds the directory's lock.
func held(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false // no lock file: a directory from before locks, or a half-made one (minAge covers it)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
