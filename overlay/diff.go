package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// delta is a computed change: entries to write, paths to delete and the
// host file behind each file entry.
type delta struct {
	entries []manifests.Entry
	deletes []string
	src     map[string]string
}

// diff turns a Change into entries and deletes against head, keeping only
// what differs and adding missing parent directories.
func diff(head tree.State, ch Change) (*delta, error) {
	want := map[string]manifests.Entry{}
	src := map[string]string{}
	if ch.Tree != "" {
		entries, err := tree.Scan(ch.Tree, nil)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			// Directories the head has keep their owner and mode: a tree
			// made by `mkdir -p` says nothing about /etc's permissions.
			if old, ok := head[e.Path]; ok && old.Type == manifests.TypeDir && e.Type == manifests.TypeDir {
				e = old
			}
			want[e.Path] = e
			src[e.Path] = filepath.Join(ch.Tree, filepath.FromSlash(e.Path))
		}
	}
	for _, a := range ch.Adds {
		dest, err := manifests.ImagePath(a.Dest)
		if err != nil {
			return nil, fmt.Errorf("--add %s: %w", a.Dest, err)
		}
		// SRC is what the operator named: a link there is followed, as cp
		// follows it, so the node gets the file, not a link into the
		// build host; links inside a directory SRC stay links.
		hostSrc, err := filepath.EvalSymlinks(a.Src)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // EvalSymlinks names itself as the operation
			}
			return nil, fmt.Errorf("--add %s: SRC %s: %w", a.Dest, a.Src, err)
		}
		fi, err := os.Stat(hostSrc)
		if err != nil {
			return nil, fmt.Errorf("--add %s: %w", a.Dest, err)
		}
		if !fi.IsDir() {
			e, err := tree.StatEntry(hostSrc, dest)
			if err != nil {
				return nil, err
			}
			want[dest] = a.override(adopt(head, e))
			src[dest] = hostSrc
			continue
		}
		entries, err := tree.Scan(hostSrc, nil)
		if err != nil {
			return nil, err
		}
		want[dest] = a.override(adopt(head, manifests.Entry{Path: dest, Type: manifests.TypeDir, Mode: 0755}))
		for _, e := range entries {
			host := filepath.Join(hostSrc, filepath.FromSlash(e.Path))
			e.Path = dest + "/" + e.Path
			want[e.Path] = a.override(adopt(head, e))
			src[e.Path] = host
		}
	}
	for _, x := range ch.Exact {
		want[x.Entry.Path] = x.Entry
		if x.Entry.Type == manifests.TypeFile {
			src[x.Entry.Path] = x.Src
		}
	}
	d := &delta{src: map[string]string{}}
	for _, p := range ch.Deletes {
		rel, err := manifests.ImagePath(p)
		if err != nil {
			return nil, fmt.Errorf("--delete %s: %w", p, err)
		}
		if manifests.HoldsStrata(rel) {
			return nil, fmt.Errorf("--delete %s: %w: it holds strata's own files", p, manifests.ErrUnsafePath)
		}
		if _, ok := head[rel]; !ok {
			return nil, fmt.Errorf("--delete %s: %w in the line's head", p, tree.ErrNotExist)
		}
		if _, ok := want[rel]; ok {
			return nil, fmt.Errorf("--delete %s: the same path is also added", p)
		}
		d.deletes = append(d.deletes, rel)
	}
	sort.Strings(d.deletes)
	for p, e := range want {
		if manifests.IsNodeState(p) {
			return nil, fmt.Errorf("%s: %w: strata node state cannot be changed by an overlay", p, manifests.ErrUnsafePath)
		}
		if err := e.Validate(); err != nil {
			return nil, err
		}
		if old, ok := head[p]; ok && old == e {
			continue
		}
		d.entries = append(d.entries, e)
		if e.Type == manifests.TypeFile {
			d.src[p] = src[p]
		}
	}
	// Parent directories the head lacks come along, root-owned 0755.
	have := map[string]bool{}
	for _, e := range d.entries {
		have[e.Path] = true
	}
	for _, e := range append([]manifests.Entry{}, d.entries...) {
		for dir := manifests.Parent(e.Path); dir != ""; dir = manifests.Parent(dir) {
			if pe, ok := head[dir]; ok {
				if pe.Type == manifests.TypeSymlink && !have[dir] {
					return nil, fmt.Errorf("%s: parent %s is a symlink to %s in the line's head: %w", e.Path, dir, pe.Target, ErrSymlinkPath)
				}
				break
			}
			if have[dir] {
				continue
			}
			if w, ok := want[dir]; ok {
				d.entries = append(d.entries, w)
			} else {
				d.entries = append(d.entries, manifests.Entry{Path: dir, Type: manifests.TypeDir, Mode: 0755})
			}
			have[dir] = true
		}
	}
	sort.Slice(d.entries, func(i, j int) bool { return d.entries[i].Path < d.entries[j].Path })
	return d, nil
}

// adopt gives a new entry the mode and owner of the path it replaces, or
// root:root with a normalised mode when the path is new.
func adopt(head tree.State, e manifests.Entry) manifests.Entry {
	if old, ok := head[e.Path]; ok && old.Type == e.Type {
		e.Mode, e.UID, e.GID = old.Mode, old.UID, old.GID
		return e
	}
	return tree.Normalise(e)
}
