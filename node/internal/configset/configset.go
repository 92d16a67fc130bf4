package configset

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"time"

	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// Claims maps each unit of cat to the tree paths it claims as
// configuration: its unit files, declared paths and reload paths (a
// directory stands for everything below it).
func Claims(cat manifests.Catalog) map[string][]string {
	out := map[string][]string{}
	for _, s := range cat.Services {
		var ps []string
		ps = append(ps, s.UnitFiles...)
		ps = append(ps, s.Paths...)
		ps = append(ps, s.ReloadPaths...)
		sort.Strings(ps)
		out[s.Unit] = compact(ps)
	}
	return out
}

func compact(ps []string) []string {
	var out []string
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

// Head returns unit's config set as the tree st has it.
func Head(claims []string, st tree.State) manifests.ConfigSet {
	set := manifests.ConfigSet{}
	for _, e := range st {
		if !claimed(claims, e.Path) {
			continue
		}
		switch e.Type {
		case manifests.TypeFile:
			set[e.Path] = e.SHA256
		case manifests.TypeSymlink:
			set[e.Path] = "link:" + e.Target
		}
	}
	return set
}

func claimed(claims []string, p string) bool {
	for _, c := range claims {
		if manifests.Within(p, c) {
			return true
		}
	}
	return false
}

// OnDisk is a unit's config set as it is on disk.
type OnDisk struct {
	Set manifests.ConfigSet
	// Changed is each path's last change (its ctime, which no one but
	// the clock sets), directories below a claimed path included: a file
	// added or removed there changes its directory.
	Changed map[string]time.Time
}

// ChangedAfter lists the paths (files and directories) changed after t,
// sorted.
func (d OnDisk) ChangedAfter(t time.Time) []string {
	var out []string
	for p, c := range d.Changed {
		if c.After(t) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// ErrTooMany reports a claimed directory holding more than
// manifests.MaxConfigSet entries.
var ErrTooMany = errors.New("too many files")

// Disk reads each unit's config set from the tree at root: claims maps
// units to their claimed paths (Claims). Nothing on the way is followed
// out of root: a symbolic link is recorded as one, never read through,
// and only regular files are read (non-blocking, bounded). A unit whose
// set cannot be read gets an error of its own.
func Disk(ctx context.Context, root string, claims map[string][]string) (map[string]OnDisk, map[string]error, error) {
	r, err := newReader(root)
	if err != nil {
		return nil, nil, err
	}
	defer r.close()
	sets, errs := map[string]OnDisk{}, map[string]error{}
	for unit, ps := range claims {
		d := OnDisk{Set: manifests.ConfigSet{}, Changed: map[string]time.Time{}}
		var uerr error
		for _, p := range ps {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			if err := r.read(p, d); err != nil {
				uerr = err
				break
			}
		}
		if uerr == nil && len(d.Set) > manifests.MaxConfigSet {
			uerr = fmt.Errorf("reading the config of %s: %w (%d, at most %d)", unit, ErrTooMany, len(d.Set), manifests.MaxConfigSet)
		}
		if uerr != nil {
			errs[unit] = uerr
			continue
		}
		sets[unit] = d
	}
	return sets, errs, nil
}

// parent returns a tree path's directory ("" for a top-level name).
func parent(p string) string {
	if d := path.Dir(p); d != "." {
		return d
	}
	return ""
}
