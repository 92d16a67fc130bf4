package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"golang.org/x/sys/unix"
)

// espFS is what boot entry work needs of an EFI system partition (paths
// are absolute on the ESP, "/loader/entries/x.conf"). A disk that is not
// running goes through mtools on the disk itself (the host may have no
// vfat driver); a running node's ESP is mounted.
type espFS interface {
	// List returns the names in directory dir (none if it is missing).
	List(dir string) ([]string, error)
	// Read reads a file of at most limit bytes.
	Read(p string, limit int64) ([]byte, error)
	// ReadHead reads the first n bytes of a file (all of a shorter one).
	ReadHead(p string, n int64) ([]byte, error)
	// Get copies p to the new host file dst; a file larger than limit
	// bytes is refused.
	Get(p, dst string, limit int64) error
	// Put copies the host file src to p, replacing it.
	Put(p, src string) error
	// Write writes data to p, replacing it.
	Write(p string, data []byte) error
	// Rename renames from to to, which must not exist.
	Rename(from, to string) error
	// Remove removes the file p; a missing one is no error.
	Remove(p string) error
	// Mkdir makes directory p and its parents.
	Mkdir(p string) error
	// Sync makes everything written durable.
	Sync() error
}

// mtoolsESP is the ESP of a disk image or device at an offset, through
// mtools.
type mtoolsESP struct {
	ctx  context.Context
	img  string // "DISK@@OFFSET"
	work string // for Write's temporary files
}

func newMtoolsESP(ctx context.Context, diskPath string, p Partition, work string) *mtoolsESP {
	return &mtoolsESP{ctx: ctx, img: fmt.Sprintf("%s@@%d", diskPath, p.Offset), work: work}
}

func (m *mtoolsESP) run(stdout io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(m.ctx, name, append([]string{"-i", m.img}, args...)...)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &limitedBuffer{b: &errb, n: 4096}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ESP: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return nil
}

func (m *mtoolsESP) List(dir string) ([]string, error) {
	var out bytes.Buffer
	if err := m.run(&limitedBuffer{b: &out, n: 1 << 20}, "mdir", "-b", "::"+dir); err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil, nil
		}
		return nil, err
	}
	var names []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			names = append(names, path.Base(strings.TrimPrefix(l, "::")))
		}
	}
	return names, nil
}

func (m *mtoolsESP) Read(p string, limit int64) ([]byte, error) {
	var out bytes.Buffer
	lb := &limitedBuffer{b: &out, n: int(limit) + 1}
	if err := m.run(lb, "mtype", "::"+p); err != nil {
		return nil, err
	}
	if int64(out.Len()) > limit {
		return nil, fmt.Errorf("ESP: %s is larger than %d bytes", p, limit)
	}
	return out.Bytes(), nil
}

// ReadHead stops mtype once it has n bytes: a UKI's head is read
// without piping its kernel and initrd through.
func (m *mtoolsESP) ReadHead(p string, n int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mtype", "-i", m.img, "::"+p)
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	var errb bytes.Buffer
	cmd.Stderr = &limitedBuffer{b: &errb, n: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("ESP: mtype %s: %w", p, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("ESP: mtype %s: %w", p, err)
	}
	b, rerr := io.ReadAll(io.LimitReader(out, n))
	full := int64(len(b)) == n
	if full {
		cancel() // the rest is not wanted
	}
	werr := cmd.Wait()
	switch {
	case rerr != nil:
		return nil, fmt.Errorf("ESP: mtype %s: %w", p, rerr)
	case werr != nil && !full:
		return nil, fmt.Errorf("ESP: mtype %s: %w: %s", p, werr, strings.TrimSpace(errb.String()))
	}
	return b, nil
}

func (m *mtoolsESP) Get(p, dst string, limit int64) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	w := &limitedFile{f: f, n: limit}
	err = m.run(w, "mtype", "::"+p)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if w.over {
		err = fmt.Errorf("ESP: %s is larger than %d bytes", p, limit)
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// limitedFile writes at most n bytes to f and notes any more.
type limitedFile struct {
	f    *os.File
	n    int64
	over bool
}

func (l *limitedFile) Write(b []byte) (int, error) {
	if int64(len(b)) > l.n {
		l.over = true
		return 0, errors.New("more than the limit")
	}
	n, err := l.f.Write(b)
	l.n -= int64(n)
	return n, err
}

func (m *mtoolsESP) Put(p, src string) error { return m.run(io.Discard, "mcopy", "-o", src, "::"+p) }

func (m *mtoolsESP) Write(p string, data []byte) error {
	f, err := os.CreateTemp(m.work, "esp-")
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	return m.Put(p, f.Name())
}

func (m *mtoolsESP) Rename(from, to string) error {
	return m.run(io.Discard, "mren", "::"+from, "::"+to)
}

func (m *mtoolsESP) Remove(p string) error {
	if names, err := m.List(path.Dir(p)); err != nil {
		return err
	} else if !containsFold(names, path.Base(p)) {
		return nil
	}
	return m.run(io.Discard, "mdel", "::"+p)
}

func (m *mtoolsESP) Mkdir(p string) error {
	if p == "/" {
		return nil
	}
	if err := m.Mkdir(path.Dir(p)); err != nil {
		return err
	}
	names, err := m.List(path.Dir(p))
	if err != nil || containsFold(names, path.Base(p)) {
		return err
	}
	return m.run(io.Discard, "mmd", "::"+p)
}

// Sync: mtools writes through to the disk; the caller syncs the disk.
func (m *mtoolsESP) Sync() error { return nil }

// containsFold reports whether names has name, ignoring case (FAT).
func containsFold(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// dirESP is an ESP mounted at a directory.
type dirESP struct{ root string }

func (d dirESP) path(p string) string { return filepath.Join(d.root, filepath.FromSlash(p)) }

func (d dirESP) List(dir string) ([]string, error) {
	ents, err := os.ReadDir(d.path(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ESP: %w", err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

func (d dirESP) Read(p string, limit int64) ([]byte, error) {
	f, err := os.Open(d.path(p))
	if err != nil {
		return nil, fmt.Errorf("ESP: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("ESP: %s: %w", p, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("ESP: %s is larger than %d bytes", p, limit)
	}
	return b, nil
}

func (d dirESP) ReadHead(p string, n int64) ([]byte, error) {
	f, err := os.Open(d.path(p))
	if err != nil {
		return nil, fmt.Errorf("ESP: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, n))
	if err != nil {
		return nil, fmt.Errorf("ESP: %s: %w", p, err)
	}
	return b, nil
}

func (d dirESP) Get(p, dst string, limit int64) error {
	in, err := os.Open(d.path(p))
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	n, err := io.Copy(out, io.LimitReader(in, limit+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = fmt.Errorf("%s is larger than %d bytes", p, limit)
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("ESP: %w", err)
	}
	return nil
}

func (d dirESP) Put(p, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(d.path(p), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("ESP: writing %s: %w", p, err)
	}
	return nil
}

func (d dirESP) Write(p string, data []byte) error {
	if err := safefile.WriteAtomic(d.path(p), data, 0o600); err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	return nil
}

func (d dirESP) Rename(from, to string) error {
	if err := os.Rename(d.path(from), d.path(to)); err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	return nil
}

func (d dirESP) Remove(p string) error {
	if err := os.Remove(d.path(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ESP: %w", err)
	}
	return nil
}

func (d dirESP) Mkdir(p string) error {
	if err := os.MkdirAll(d.path(p), 0o700); err != nil {
		return fmt.Errorf("ESP: %w", err)
	}
	return nil
}

func (d dirESP) Sync() error { return safefile.SyncFS(d.root) }

// mountESP mounts the ESP partition device dev (vfat, only root may read
// it) at a new directory below work, in this process's private mount
// namespace; unmount takes it down.
func mountESP(dev, work string) (dirESP, func() error, error) {
	dir := filepath.Join(work, "esp")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return dirESP{}, nil, fmt.Errorf("mounting the ESP: %w", err)
	}
	if err := unix.Mount(dev, dir, "vfat", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "umask=0077"); err != nil {
		return dirESP{}, nil, fmt.Errorf("mounting the ESP %s: %w", dev, err)
	}
	return dirESP{root: dir}, func() error {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmounting the ESP %s: %w", dev, err)
		}
		return nil
	}, nil
}

// limitedBuffer keeps the first n bytes written and drops the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
