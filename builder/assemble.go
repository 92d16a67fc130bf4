package builder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// source is where a file entry's content comes from.
type source struct {
	host string // a file on the build host
	data []byte // inline content
}

// layout is a tree under construction: entries and content sources.
type layout struct {
	state tree.State
	src   map[string]source
}

func newLayout() *layout {
	return &layout{state: tree.State{}, src: map[string]source{}}
}

// open returns the content of a file entry.
func (l *layout) open(e manifests.Entry) (io.ReadCloser, error) {
	s, ok := l.src[e.Path]
	if !ok {
		return nil, fmt.Errorf("no content for %s", e.Path)
	}
	if s.host != "" {
		return os.Open(s.host)
	}
	return io.NopCloser(bytes.NewReader(s.data)), nil
}

// put adds or replaces an entry; for files, src says where content is.
// Missing parent directories are created (0755, root-owned).
func (l *layout) put(e manifests.Entry, src source) error {
	if err := l.mkdirs(manifests.Parent(e.Path)); err != nil {
		return err
	}
	if err := l.state.Put(e); err != nil {
		return err
	}
	if e.Type == manifests.TypeFile {
		l.src[e.Path] = src
	} else {
		delete(l.src, e.Path)
	}
	return nil
}

func (l *layout) mkdirs(dir string) error {
	if dir == "" {
		return nil
	}
	if e, ok := l.state[dir]; ok {
		if e.Type != manifests.TypeDir {
			return fmt.Errorf("creating %s: %w", dir, tree.ErrNotDir)
		}
		return nil
	}
	if err := l.mkdirs(manifests.Parent(dir)); err != nil {
		return err
	}
	l.state[dir] = manifests.Entry{Path: dir, Type: manifests.TypeDir, Mode: 0755}
	return nil
}

func (l *layout) remove(p string) error {
	if err := l.state.Delete(p); err != nil {
		return err
	}
	for q := range l.src {
		if manifests.Within(q, p) {
			delete(l.src, q)
		}
	}
	return nil
}

// addHostTree places the host directory dir at dest ("" for the root).
// Unless preserve is set, owners become root and modes 0644/0755.
func (l *layout) addHostTree(dir, dest string, preserve bool) error {
	entries, err := tree.Scan(dir, nil)
	if err != nil {
		return err
	}
	for _, e := range entries {
		host := filepath.Join(dir, filepath.FromSlash(e.Path))
		if dest != "" {
			e.Path = dest + "/" + e.Path
		}
		if !preserve {
			normalise(&e)
		}
		if err := l.put(e, source{host: host}); err != nil {
			return err
		}
	}
	return nil
}

func normalise(e *manifests.Entry) { *e = tree.Normalise(*e) }

// addFile applies one recipe files step.
func (l *layout) addFile(r *Recipe, f File) error {
	p, err := TreePath(f.Path)
	if err != nil {
		return err
	}
	mode, _ := parseMode(f.Mode)
	uid, gid, _ := parseOwner(f.Owner)
	e := manifests.Entry{Path: p, UID: uid, GID: gid, Mode: mode}
	switch {
	case f.Src != "":
		host := r.Path(f.Src)
		fi, err := os.Stat(host)
		if err != nil {
			return fmt.Errorf("files %s: %w", f.Path, err)
		}
		if fi.IsDir() {
			if err := l.addHostTree(host, p, false); err != nil {
				return err
			}
			return l.adjust(f, p, mode, uid, gid)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("files %s: src %s is not a regular file or directory", f.Path, f.Src)
		}
		// src is followed if it is a symlink, as cp would.
		sum, n, err := tree.HashFile(host)
		if err != nil {
			return err
		}
		e.Type, e.Size, e.SHA256 = manifests.TypeFile, n, sum
		if f.Mode == "" {
			se := manifests.Entry{Type: manifests.TypeFile, Mode: tree.ModeOf(fi.Mode())}
			normalise(&se)
			e.Mode = se.Mode
		}
		return l.put(e, source{host: host})
	case f.Content != nil:
		data := []byte(*f.Content)
		sum := sha256.Sum256(data)
		e.Type, e.Size, e.SHA256 = manifests.TypeFile, int64(len(data)), hex.EncodeToString(sum[:])
		if f.Mode == "" {
			e.Mode = 0644
		}
		return l.put(e, source{data: data})
	case f.Dir:
		e.Type = manifests.TypeDir
		if f.Mode == "" {
			e.Mode = 0755
		}
		return l.put(e, source{})
	case f.Symlink != "":
		e.Type, e.Target, e.Mode = manifests.TypeSymlink, f.Symlink, 0777
		return l.put(e, source{})
	}
	// Only mode and/or owner: adjust an existing path.
	return l.adjust(f, p, mode, uid, gid)
}

// adjust applies a files step's mode and owner, when given, to path p.
func (l *layout) adjust(f File, p string, mode manifests.Mode, uid, gid int) error {
	old, ok := l.state[p]
	if !ok {
		return fmt.Errorf("files %s: %w (mode/owner given for a path the tree lacks)", f.Path, tree.ErrNotExist)
	}
	if f.Mode != "" && old.Type != manifests.TypeSymlink {
		old.Mode = mode
	}
	if f.Owner != "" {
		old.UID, old.GID = uid, gid
	}
	l.state[p] = old
	return nil
}
