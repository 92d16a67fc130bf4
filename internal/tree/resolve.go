package tree

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// ErrSymlinkLoop reports a path whose resolution follows more than 40
// symbolic links (of the manifests.ErrRejected class).
var ErrSymlinkLoop = manifests.Rejection("too many levels of symbolic links")

// maxLinkHops is the number of symbolic links one lookup may follow, as in
// Linux (ELOOP after 40).
const maxLinkHops = 40

// ResolveFS follows name inside fsys like a chrooted lookup: absolute link
// targets restart at the tree root, ".." never climbs above it. It returns
// the symlink-free path of the final file and the symlinks it passed
// through whose full path named the file (the links of a chain, not links
// of parent directories). Only symlink-free paths are ever opened, so an
// [os.DirFS] never follows a link onto the host.
//
// A missing component yields an error matching [fs.ErrNotExist]; too many
// links yield [ErrSymlinkLoop].
func ResolveFS(fsys fs.FS, name string) (final string, links []string, err error) {
	rest := splitPath(name)
	var cur []string
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		cand := joinPath(cur, c)
		fi, err := fs.Lstat(fsys, cand)
		if err != nil {
			return "", links, fmt.Errorf("resolving %s: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(rest) > 0 && !fi.IsDir() {
				return "", links, fmt.Errorf("resolving %s: %s is not a directory: %w", name, cand, fs.ErrNotExist)
			}
			cur = append(cur, c)
			continue
		}
		hops++
		if hops > maxLinkHops {
			return "", links, fmt.Errorf("resolving %s: %w", name, ErrSymlinkLoop)
		}
		target, err := fs.ReadLink(fsys, cand)
		if err != nil {
			return "", links, fmt.Errorf("resolving %s: %w", name, err)
		}
		if target == "" {
			return "", links, fmt.Errorf("resolving %s: empty link %s: %w", name, cand, fs.ErrNotExist)
		}
		if len(rest) == 0 {
			links = append(links, cand)
		}
		if strings.HasPrefix(target, "/") {
			cur = cur[:0]
		}
		rest = append(splitPath(target), rest...)
	}
	return strings.Join(cur, "/"), links, nil
}

// Resolve is ResolveFS in state: it follows symlinks in every component
// of name, as inside a chroot, and returns the final path ("." for the
// root).
func Resolve(state State, name string) (string, error) {
	final, _, err := ResolveFS(NewFS(state, nil), name)
	if err != nil {
		return "", err
	}
	if final == "" {
		return ".", nil
	}
	return final, nil
}

// splitPath splits a slash-separated path into its elements, dropping the
// empty elements of leading, doubled and trailing slashes.
func splitPath(p string) []string {
	var out []string
	for el := range strings.SplitSeq(p, "/") {
		if el != "" {
			out = append(out, el)
		}
	}
	return out
}

func joinPath(dir []string, el string) string {
	if len(dir) == 0 {
		return el
	}
	return strings.Join(dir, "/") + "/" + el
}
