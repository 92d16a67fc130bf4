package dirfs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// checkNodePaths refuses an overlay that would write or delete through a
// symlinked directory on the node: on a directory node such a write could
// land outside the root, and even inside it would not be where the
// manifest says.
func checkNodePaths(n nodestate.Node, m *manifests.OverlayManifest) error {
	paths := append([]string{}, m.Deletes...)
	for _, e := range m.Entries {
		paths = append(paths, e.Path)
	}
	if err := checkParents(n, paths); err != nil {
		return fmt.Errorf("overlay %s: %w", m.Version, err)
	}
	return nil
}

// checkParents refuses paths whose parent directories on the node include
// a symlink.
func checkParents(n nodestate.Node, paths []string) error {
	checked := map[string]bool{}
	for _, p := range paths {
		for dir := manifests.Parent(p); dir != ""; dir = manifests.Parent(dir) {
			if checked[dir] {
				break
			}
			checked[dir] = true
			fi, err := os.Lstat(n.Path(dir))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("checking %s: %w", dir, err)
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				continue
			}
			target, _ := os.Readlink(n.Path(dir))
			where := "inside the root"
			if strings.HasPrefix(target, "/") || manifests.CheckLinkTarget(dir, target) != nil {
				where = "which leaves the root"
			}
			return fmt.Errorf("%s would be written through symlink %s -> %s, %s: %w", p, dir, target, where, nodestate.ErrSymlinkPath)
		}
	}
	return nil
}

// planOps turns a manifest into journal ops against the node's current
// tree: deletes first, then entries in path order. index maps entry paths
// to op numbers.
func planOps(n nodestate.Node, m *manifests.OverlayManifest) ([]op, map[string]int, error) {
	var ops []op
	index := map[string]int{}
	for _, d := range m.Deletes {
		old, exists, err := current(n, d)
		if err != nil {
			return nil, nil, err
		}
		if !exists {
			return nil, nil, fmt.Errorf("overlay %s deletes %s, which the node does not have: %w", m.Version, d, nodestate.ErrDrift)
		}
		ops = append(ops, op{Kind: opDelete, Path: d, Existed: true, Old: old})
	}
	for _, e := range m.Entries {
		old, exists, err := current(n, e.Path)
		if err != nil {
			return nil, nil, err
		}
		o := op{Path: e.Path, Entry: e, Existed: exists, Old: old}
		switch {
		case e.Type == manifests.TypeDir && exists && old.Type == manifests.TypeDir:
			o.Kind = opMeta
		case e.Type == manifests.TypeDir:
			o.Kind = opMkdir
		default:
			o.Kind = opReplace
		}
		index[e.Path] = len(ops)
		ops = append(ops, o)
	}
	return ops, index, nil
}

// current describes what the node has at rel (owner, mode and type only;
// content is not hashed).
func current(n nodestate.Node, rel string) (manifests.Entry, bool, error) {
	fi, err := os.Lstat(n.Path(rel))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// Below a path that is not (yet) a directory: an earlier op of the
		// same overlay replaces the file above with a directory.
		return manifests.Entry{}, false, nil
	}
	if err != nil {
		return manifests.Entry{}, false, fmt.Errorf("inspecting %s: %w", rel, err)
	}
	e := manifests.Entry{Path: rel, Mode: tree.ModeOf(fi.Mode())}
	uid, gid := owner(fi)
	e.UID, e.GID = uid, gid
	switch {
	case fi.IsDir():
		e.Type = manifests.TypeDir
	case fi.Mode()&os.ModeSymlink != 0:
		e.Type = manifests.TypeSymlink
	default:
		e.Type = manifests.TypeFile
	}
	return e, true, nil
}
