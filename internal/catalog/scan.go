package catalog

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// unitDirs are the directories unit files are loaded from, highest
// priority first.
var unitDirs = []string{"etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"}

// unitFile is one unit file or drop-in found in a unit directory.
type unitFile struct {
	paths   []string // the path in the directory, the links it passes, its target
	content string   // symlink-free path to read; "" when it does not resolve
	masked  bool     // a symlink to /dev/null
}

// unitSource gathers everything the unit directories hold for one unit.
type unitSource struct {
	defs    []unitFile            // definitions, highest priority first
	dropins map[string][]unitFile // drop-in base name -> files, highest priority first
}

// scanUnits lists the *.service files and their <unit>.d/*.conf drop-ins
// in the unit directories of fsys. Units without a definition (only
// drop-ins, or only a mask) are left out.
func scanUnits(fsys fs.FS) (map[string]*unitSource, error) {
	units := map[string]*unitSource{}
	get := func(name string) *unitSource {
		u := units[name]
		if u == nil {
			u = &unitSource{dropins: map[string][]unitFile{}}
			units[name] = u
		}
		return u
	}
	seen := map[string]bool{}
	for _, d := range unitDirs {
		dir, ok, err := resolveDir(fsys, d)
		if err != nil {
			return nil, fmt.Errorf("scanning unit directory %s: %w", d, err)
		}
		if !ok || seen[dir] {
			continue // absent, or the same directory as before (merged /usr)
		}
		seen[dir] = true
		ents, err := fs.ReadDir(fsys, fsName(dir))
		if err != nil {
			return nil, fmt.Errorf("reading unit directory %s: %w", dir, err)
		}
		for _, e := range ents {
			name := e.Name()
			p := path.Join(dir, name)
			switch {
			case strings.HasSuffix(name, ".service"):
				f, ok, err := readUnitFile(fsys, p)
				if err != nil {
					return nil, err
				}
				if ok && !f.masked {
					u := get(name)
					u.defs = append(u.defs, f)
				}
			case strings.HasSuffix(name, ".service.d"):
				if err := scanDropins(fsys, p, get(strings.TrimSuffix(name, ".d"))); err != nil {
					return nil, err
				}
			}
		}
	}
	for name, u := range units {
		if len(u.defs) == 0 {
			delete(units, name)
		}
	}
	return units, nil
}

// scanDropins adds the *.conf files of drop-in directory p to u.
func scanDropins(fsys fs.FS, p string, u *unitSource) error {
	dir, ok, err := resolveDir(fsys, p)
	if err != nil {
		return fmt.Errorf("scanning drop-in directory %s: %w", p, err)
	}
	if !ok {
		return nil
	}
	ents, err := fs.ReadDir(fsys, fsName(dir))
	if err != nil {
		return fmt.Errorf("reading drop-in directory %s: %w", dir, err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".conf") {
			continue
		}
		f, ok, err := readUnitFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if ok {
			u.dropins[e.Name()] = append(u.dropins[e.Name()], f)
		}
	}
	return nil
}

// readUnitFile classifies the directory entry p: a regular file, a symlink
// (followed inside the tree), or a mask (a symlink to /dev/null). ok is
// false for anything else, such as a directory.
func readUnitFile(fsys fs.FS, p string) (f unitFile, ok bool, err error) {
	fi, err := fs.Lstat(fsys, p)
	if err != nil {
		return f, false, fmt.Errorf("inspecting unit file %s: %w", p, err)
	}
	switch {
	case fi.Mode().IsRegular():
		return unitFile{paths: []string{p}, content: p}, true, nil
	case fi.Mode()&fs.ModeSymlink == 0:
		return f, false, nil
	}
	target, err := fs.ReadLink(fsys, p)
	if err != nil {
		return f, false, fmt.Errorf("reading unit link %s: %w", p, err)
	}
	if !strings.HasPrefix(target, "/") {
		target = path.Join(path.Dir(p), target)
	}
	if treePath(target) == "dev/null" {
		return unitFile{paths: []string{p}, masked: true}, true, nil
	}
	final, links, isFile, err := resolveFile(fsys, p)
	if err != nil {
		return f, false, fmt.Errorf("resolving unit file %s: %w", p, err)
	}
	f.paths = append([]string{p}, links...)
	if isFile {
		f.paths = append(f.paths, final)
		f.content = final
	}
	return f, true, nil
}

// effective returns the unit files of u that take part in its
// configuration: the highest-priority definition, then one file per
// drop-in name (the highest-priority one; a masked drop-in hides lower
// ones and adds nothing), in drop-in name order. all lists every path of
// every file, masks of drop-ins included.
func (u *unitSource) effective() (use []unitFile, all []string) {
	use = append(use, u.defs[0])
	for _, f := range u.defs {
		all = append(all, f.paths...)
	}
	names := make([]string, 0, len(u.dropins))
	for n := range u.dropins {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files := u.dropins[n]
		for _, f := range files {
			all = append(all, f.paths...)
		}
		if !files[0].masked {
			use = append(use, files[0])
		}
	}
	return use, all
}
