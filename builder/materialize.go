package builder

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// materialize makes the directory dir hold the layout's tree, with exact
// owners and modes (so it needs root). prev is what dir holds now, as last
// scanned (nil for an empty directory). Paths that are gone or changed
// kind are removed; entries that are still in place (a file whose content
// comes from its own place in dir, a directory, an unchanged symlink) only
// get their owner and mode set when those changed; everything else is
// created.
func (l *layout) materialize(dir string, prev tree.State) error {
	kept := map[string]bool{}
	for _, p := range sortedPaths(prev) {
		old := prev[p]
		e, ok := l.state[p]
		host := filepath.Join(dir, filepath.FromSlash(p))
		same := ok && e.Type == old.Type
		switch old.Type {
		case manifests.TypeSymlink:
			same = same && e.Target == old.Target
		case manifests.TypeFile:
			same = same && l.src[p].host == host
		}
		if same {
			kept[p] = true
			continue
		}
		if err := removeTree(host); err != nil {
			return err
		}
	}
	for _, e := range l.state.Entries() {
		host := filepath.Join(dir, filepath.FromSlash(e.Path))
		if kept[e.Path] {
			if old := prev[e.Path]; old.Mode != e.Mode || old.UID != e.UID || old.GID != e.GID {
				if err := tree.SetMeta(host, e); err != nil {
					return err
				}
			}
			continue
		}
		if err := l.create(host, e); err != nil {
			return err
		}
	}
	return nil
}

// create makes entry e at host, content from the layout's source.
func (l *layout) create(host string, e manifests.Entry) error {
	var r io.Reader
	if e.Type == manifests.TypeFile {
		rc, err := l.open(e)
		if err != nil {
			return fmt.Errorf("materialising %s: %w", e.Path, err)
		}
		defer rc.Close()
		r = rc
	}
	return tree.Create(host, e, r)
}

func sortedPaths(s tree.State) []string {
	out := make([]string, 0, len(s))
	for p := range s {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
