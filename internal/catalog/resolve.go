package catalog

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/strata-dev/strata/internal/tree"
)

// resolve is tree.ResolveFS: a chrooted lookup in fsys.
func resolve(fsys fs.FS, name string) (final string, links []string, err error) {
	return tree.ResolveFS(fsys, name)
}

// resolveFile is resolve for a path that must name a regular file. It
// reports ok=false, without error, when the path does not exist or names
// something else.
func resolveFile(fsys fs.FS, name string) (final string, links []string, ok bool, err error) {
	final, links, err = resolve(fsys, name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", links, false, nil
		}
		return "", links, false, err
	}
	fi, err := fs.Lstat(fsys, fsName(final))
	if err != nil {
		return "", links, false, fmt.Errorf("inspecting %s: %w", final, err)
	}
	return final, links, fi.Mode().IsRegular(), nil
}

// resolveDir is resolve for a path that must name a directory; ok=false
// means it does not.
func resolveDir(fsys fs.FS, name string) (final string, ok bool, err error) {
	final, _, err = resolve(fsys, name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	fi, err := fs.Lstat(fsys, fsName(final))
	if err != nil {
		return "", false, fmt.Errorf("inspecting %s: %w", final, err)
	}
	return final, fi.IsDir(), nil
}

// fsName turns a tree-relative path into an fs.FS name ("" is the root).
func fsName(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// treePath turns an absolute or relative path into a clean tree-relative
// path, lexically, clamping ".." at the root.
func treePath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}
