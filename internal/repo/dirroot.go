package repo

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// heldRoot is the repository's directory kept open by KeepOpen.
type heldRoot struct {
	f  *os.File
	rc syscall.RawConn
	at time.Time // when it was opened
}

// KeepOpen makes d keep its directory open between calls instead of
// opening and closing it on every member it resolves: a server answering
// many requests a second saves two system calls and a path walk on each.
// The directory is opened again by its path once the held one is older
// than every, so a directory moved into Dir's place is served within
// every. Members are still resolved beneath it with openat2, as always.
// The last directory held is closed when d is garbage-collected.
func (d *DirStore) KeepOpen(every time.Duration) {
	d.keepFor.Store(int64(every))
}

// withRoot calls fn with a descriptor of the repository's directory: the
// held one (KeepOpen), or one opened for the call and closed after it.
func (d *DirStore) withRoot(fn func(root int) error) error {
	every := time.Duration(d.keepFor.Load())
	if every <= 0 {
		root, err := unix.Open(d.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: d.Dir, Err: err}
		}
		defer unix.Close(root)
		return fn(root)
	}
	// A held directory is closed when it is replaced, which can happen
	// while a call is using it; such a call runs again on the one that
	// replaced it, under the lock that replacing takes.
	h, err := d.heldRoot(every, false)
	if err != nil {
		return err
	}
	var ferr error
	err = h.rc.Control(func(fd uintptr) { ferr = fn(int(fd)) })
	if err != nil && d.root.Load() != h {
		d.rootMu.Lock()
		defer d.rootMu.Unlock()
		if h, err = d.heldRoot(every, true); err != nil {
			return err
		}
		err = h.rc.Control(func(fd uintptr) { ferr = fn(int(fd)) })
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: d.Dir, Err: err}
	}
	return ferr
}

// heldRoot returns the held directory, opened again when it is older
// than every. locked: the caller holds rootMu, and any held directory
// will do.
func (d *DirStore) heldRoot(every time.Duration, locked bool) (*heldRoot, error) {
	old := d.root.Load()
	if old != nil && (locked || time.Since(old.at) < every) {
		return old, nil
	}
	if !locked {
		d.rootMu.Lock()
		defer d.rootMu.Unlock()
		if old = d.root.Load(); old != nil && time.Since(old.at) < every {
			return old, nil
		}
	}
	f, err := os.OpenFile(d.Dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening %s: %w", d.Dir, err)
	}
	h := &heldRoot{f: f, rc: rc, at: time.Now()}
	d.root.Store(h)
	if old != nil {
		old.f.Close()
	}
	return h, nil
}

// rootState is DirStore's held directory (KeepOpen).
type rootState struct {
	keepFor atomic.Int64 // KeepOpen's every, in nanoseconds; 0: not kept
	root    atomic.Pointer[heldRoot]
	rootMu  sync.Mutex
}
