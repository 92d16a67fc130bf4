package repo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// DirStore is a repository in a local directory. Members are opened
// beneath Dir with openat2(RESOLVE_BENEATH), never through a symlink as
// their last component, and non-blocking, so a symlink cannot lead a read
// out of the repository and a FIFO cannot hang it.
type DirStore struct {
	// Dir is the repository's directory.
	Dir string

	mu     sync.Mutex
	polled string // the index's size, mtime and inode at the last Poll
	rootState
}

var _ Putter = (*DirStore)(nil)

// Dir returns the store of the repository in directory dir.
func Dir(dir string) *DirStore { return &DirStore{Dir: dir} }

// Path returns the host path of member name.
func (d *DirStore) Path(name string) string { return filepath.Join(d.Dir, filepath.FromSlash(name)) }

// Open opens member name; see Store.
func (d *DirStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	f, fi, err := d.OpenFile(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	return &member{ctx: ctx, f: f, left: fi.Size()}, fi.Size(), nil
}

// OpenFile opens member name as Open does and returns the file itself
// (for a server that seeks in it) with its stat.
func (d *DirStore) OpenFile(ctx context.Context, name string) (*os.File, fs.FileInfo, error) {
	fd, err := d.openPath(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(fd)
	f, err := safefile.Reopen(fd, d.Path(name))
	if err != nil {
		return nil, nil, d.notRegular(name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, d.pathErr(name, err)
	}
	return f, fi, nil
}

// StatFile is OpenFile without the open for reading: the size and
// modification time of member name, resolved and checked as OpenFile
// does (a regular file inside the repository), for answering a
// conditional request without reading.
func (d *DirStore) StatFile(ctx context.Context, name string) (size int64, mtime time.Time, err error) {
	fd, err := d.openPath(ctx, name)
	if err != nil {
		return 0, time.Time{}, err
	}
	defer unix.Close(fd)
	st, err := safefile.StatRegular(fd, d.Path(name))
	if err != nil {
		return 0, time.Time{}, d.notRegular(name, err)
	}
	return st.Size, time.Unix(st.Mtim.Unix()), nil
}

// openPath resolves member name inside the repository to an O_PATH
// descriptor: a device's or FIFO's open never runs, and the type is
// checked before the file is reopened for reading.
func (d *DirStore) openPath(ctx context.Context, name string) (int, error) {
	if err := ctx.Err(); err != nil {
		return -1, d.pathErr(name, err)
	}
	if !fs.ValidPath(name) || name == "." {
		return -1, d.pathErr(name, manifests.ErrUnsafePath)
	}
	fd := -1
	err := d.withRoot(func(root int) error {
		var err error
		fd, err = unix.Openat2(root, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		})
		return err
	})
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return -1, err
	case errors.Is(err, unix.EXDEV):
		return -1, d.pathErr(name, fmt.Errorf("%w: leaves the repository", manifests.ErrUnsafePath))
	case errors.Is(err, unix.ELOOP):
		return -1, d.pathErr(name, fmt.Errorf("%w: a symlink", ErrNotRegular))
	case err != nil:
		return -1, d.pathErr(name, err)
	}
	return fd, nil
}

// notRegular words err, from checking member name's descriptor.
func (d *DirStore) notRegular(name string, err error) error {
	if errors.Is(err, safefile.ErrNotRegular) {
		return d.pathErr(name, fmt.Errorf("%w: %w", ErrNotRegular, err))
	}
	return d.pathErr(name, err)
}

func (d *DirStore) pathErr(name string, err error) error {
	return &fs.PathError{Op: "open", Path: d.Path(name), Err: err}
}

// Put writes member name atomically: a temporary file beside it, synced,
// then renamed over it.
func (d *DirStore) Put(ctx context.Context, name string, r io.Reader) error {
	if !fs.ValidPath(name) || name == "." {
		return &fs.PathError{Op: "put", Path: d.Path(name), Err: manifests.ErrUnsafePath}
	}
	dst := d.Path(name)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	// A fresh name, created exclusively: a link planted where a fixed
	// temporary name would be cannot redirect the write.
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	tmp := out.Name()
	if err := out.Chmod(0o644); err != nil {
		out.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	_, err = io.Copy(out, &member{ctx: ctx, f: r, left: -1})
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return safefile.SyncDir(filepath.Dir(dst))
}

// Remove deletes member name, a regular file; anything else there (a
// directory, a symlink) is refused with ErrNotRegular and left.
func (d *DirStore) Remove(ctx context.Context, name string) error {
	if !fs.ValidPath(name) || name == "." {
		return &fs.PathError{Op: "remove", Path: d.Path(name), Err: manifests.ErrUnsafePath}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p := d.Path(name)
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("removing %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "remove", Path: p, Err: ErrNotRegular}
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("removing %s: %w", p, err)
	}
	return safefile.SyncDir(filepath.Dir(p))
}

// member reads at most left bytes of f (no bound when left < 0) and stops
// when ctx is done.
type member struct {
	ctx  context.Context
	f    io.Reader
	left int64
}

func (m *member) Read(p []byte) (int, error) {
	if err := m.ctx.Err(); err != nil {
		return 0, err
	}
	if m.left == 0 {
		return 0, io.EOF
	}
	if m.left > 0 && int64(len(p)) > m.left {
		p = p[:m.left]
	}
	n, err := m.f.Read(p)
	if m.left > 0 {
		m.left -= int64(n)
	}
	return n, err
}

func (m *member) Close() error {
	if c, ok := m.f.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Poll reports whether the index changed since the last Poll (true the
// first time): its size, modification time or inode differ. It reads
// nothing but the index's metadata.
func (d *DirStore) Poll(ctx context.Context) (bool, error) {
	f, fi, err := d.OpenFile(ctx, IndexFile)
	if err != nil {
		return false, err
	}
	f.Close()
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	stamp := fmt.Sprintf("%d-%d-%d", fi.Size(), fi.ModTime().UnixNano(), ino)
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := stamp != d.polled
	d.polled = stamp
	return changed, nil
}

// Poller is a Store that can tell cheaply whether its index changed.
type Poller interface {
	Store
	// Poll reports whether the index changed since the last Poll (true
	// the first time).
	Poll(ctx context.Context) (bool, error)
}

var (
	_ Poller = (*DirStore)(nil)
	_ Poller = (*HTTPStore)(nil)
)

// Rereadable reports that the members are local files: reading one again
// costs nothing.
func (d *DirStore) Rereadable() bool { return true }

func (d *DirStore) localDir() string { return d.Dir }
