package tree

import (
	"bytes"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// FS presents a State, with file contents from an Opener, as a read-only
// fs.FS that also implements fs.ReadLinkFS. Symlinks are not followed by
// Open of the link itself; callers resolve them with ReadLink, as they
// would inside a chroot. It lets tree analysis (the service catalog) run on
// a tree that exists only as entries and content sources.
type FS struct {
	state State
	open  Opener
}

var _ fs.ReadLinkFS = (*FS)(nil)

// NewFS returns an FS over state.
func NewFS(state State, open Opener) *FS { return &FS{state: state, open: open} }

func (f *FS) lookup(op, name string) (manifests.Entry, error) {
	if !fs.ValidPath(name) {
		return manifests.Entry{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return manifests.Entry{Path: ".", Type: manifests.TypeDir, Mode: 0755}, nil
	}
	e, ok := f.state[name]
	if !ok {
		return e, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return e, nil
}

// Open opens name, following symlinks inside the tree as a chroot would
// (absolute targets start at the tree's root, ".." stops at it).
func (f *FS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	resolved, err := Resolve(f.state, name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	e, err := f.lookup("open", resolved)
	if err != nil {
		return nil, err
	}
	file := &memFile{info: info{e}}
	switch e.Type {
	case manifests.TypeFile:
		rc, err := f.open(e)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		// Content that can be read at an offset (a host file) is read
		// where it lies, up to the entry's size: the service catalog
		// reads the headers of programs and libraries of megabytes.
		if ra, ok := rc.(io.ReaderAt); ok {
			file.r, file.closer = io.NewSectionReader(ra, 0, e.Size), rc
			return file, nil
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		file.r = bytes.NewReader(b)
	case manifests.TypeDir:
		file.fsys, file.r = f, bytes.NewReader(nil)
	default:
		file.r = bytes.NewReader(nil)
	}
	return file, nil
}

// ReadLink returns a symlink's target.
func (f *FS) ReadLink(name string) (string, error) {
	e, err := f.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if e.Type != manifests.TypeSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return e.Target, nil
}

// Lstat describes name without following a final symlink.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	e, err := f.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	return info{e}, nil
}

// ReadDir lists a directory, sorted by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := f.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if e.Type != manifests.TypeDir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: ErrNotDir}
	}
	prefix := name + "/"
	if name == "." {
		prefix = ""
	}
	var out []fs.DirEntry
	for p, c := range f.state {
		if strings.HasPrefix(p, prefix) && !strings.Contains(p[len(prefix):], "/") {
			out = append(out, fs.FileInfoToDirEntry(info{c}))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

type info struct{ e manifests.Entry }

func (i info) Name() string       { return path.Base(i.e.Path) }
func (i info) Size() int64        { return i.e.Size }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return i.e.Type == manifests.TypeDir }
func (i info) Sys() any           { return i.e }
func (i info) Mode() fs.FileMode {
	m := FileMode(i.e.Mode)
	switch i.e.Type {
	case manifests.TypeDir:
		m |= fs.ModeDir
	case manifests.TypeSymlink:
		m |= fs.ModeSymlink
	}
	return m
}

type memFile struct {
	info   info
	r      readerAt
	closer io.Closer // the content's source, when r reads it in place
	fsys   *FS
	dir    []fs.DirEntry // remaining entries for ReadDir; nil until first call
}

type readerAt interface {
	io.Reader
	io.ReaderAt
}

func (m *memFile) Stat() (fs.FileInfo, error) { return m.info, nil }
func (m *memFile) Read(b []byte) (int, error) { return m.r.Read(b) }

func (m *memFile) Close() error {
	if m.closer == nil {
		return nil
	}
	return m.closer.Close()
}
func (m *memFile) ReadAt(b []byte, off int64) (int, error) {
	return m.r.ReadAt(b, off)
}

// ReadDir returns the next n entries of the directory (all remaining ones
// for n <= 0), as fs.ReadDirFile specifies.
func (m *memFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if m.fsys == nil {
		return nil, &fs.PathError{Op: "readdir", Path: m.info.e.Path, Err: ErrNotDir}
	}
	if m.dir == nil {
		all, err := m.fsys.ReadDir(m.info.e.Path)
		if err != nil {
			return nil, err
		}
		m.dir = all
	}
	if n <= 0 {
		out := m.dir
		m.dir = m.dir[len(m.dir):]
		return out, nil
	}
	if len(m.dir) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(m.dir))
	out := m.dir[:k]
	m.dir = m.dir[k:]
	return out, nil
}
