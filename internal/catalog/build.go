package catalog

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// Declared is a path a recipe (or a unit file) declares for a service.
type Declared struct {
	// Unit is the unit name, for example "demo-web.service".
	Unit string
	// Path is tree-relative, without a leading slash: a file such as
	// "etc/demo/web.conf" or a directory such as "etc/nginx".
	Path string
	// Reload means a change to Path only reloads the unit.
	Reload bool
}

// Build scans fsys (an fs.FS rooted at the tree's root; paths are like
// "etc/systemd/system/x.service") and returns the sorted service catalog.
//
// Units are the *.service files of etc/systemd/system, usr/lib/systemd/system
// and lib/systemd/system (in that priority) with their <unit>.d/*.conf
// drop-ins. Their Exec programs, the libraries those load and the
// X-Strata-Paths= and X-Strata-Reload-Paths= keys are recorded, together
// with declared. A declared path for a unit the tree does not define is an
// error matching [ErrUnknownUnit]; a malformed path matches [ErrBadPath].
func Build(fsys fs.FS, declared []Declared) (manifests.Catalog, error) {
	units, err := scanUnits(fsys)
	if err != nil {
		return manifests.Catalog{}, err
	}
	byUnit := map[string][]Declared{}
	for _, d := range declared {
		if units[d.Unit] == nil {
			return manifests.Catalog{}, fmt.Errorf("%w %s: declared path %s", ErrUnknownUnit, d.Unit, d.Path)
		}
		if err := manifests.ValidPath(d.Path); err != nil {
			return manifests.Catalog{}, fmt.Errorf("%w: unit %s: %w", ErrBadPath, d.Unit, err)
		}
		byUnit[d.Unit] = append(byUnit[d.Unit], d)
	}
	names := make([]string, 0, len(units))
	for n := range units {
		names = append(names, n)
	}
	sort.Strings(names)
	b := newBuilder(fsys)
	cat := manifests.Catalog{Services: make([]manifests.Service, 0, len(names))}
	for _, n := range names {
		svc, err := b.service(n, units[n], byUnit[n])
		if err != nil {
			return manifests.Catalog{}, err
		}
		cat.Services = append(cat.Services, svc)
	}
	return cat, nil
}

// service builds the catalog entry of unit name.
func (b *builder) service(name string, u *unitSource, decl []Declared) (manifests.Service, error) {
	use, all := u.effective()
	var cfg unitConfig
	for _, f := range use {
		if f.content == "" {
			continue // a dangling link: nothing to parse
		}
		data, err := fs.ReadFile(b.fsys, f.content)
		if err != nil {
			return manifests.Service{}, fmt.Errorf("reading unit %s: %w", f.content, err)
		}
		cfg.apply(parseUnit(data))
	}
	bins, libs, paths, reload := pathSet{}, pathSet{}, pathSet{}, pathSet{}
	for _, prog := range cfg.programs() {
		if err := b.addCommand(prog, bins, libs, 0); err != nil {
			return manifests.Service{}, fmt.Errorf("unit %s: %w", name, err)
		}
	}
	for _, v := range cfg.paths {
		p, err := strataPath(v)
		if err != nil {
			return manifests.Service{}, fmt.Errorf("unit %s: X-Strata-Paths: %w", name, err)
		}
		paths.add(p)
	}
	for _, v := range cfg.reloadPaths {
		p, err := strataPath(v)
		if err != nil {
			return manifests.Service{}, fmt.Errorf("unit %s: X-Strata-Reload-Paths: %w", name, err)
		}
		reload.add(p)
	}
	for _, d := range decl {
		if d.Reload {
			reload.add(d.Path)
		} else {
			paths.add(d.Path)
		}
	}
	files := pathSet{}
	files.add(all...)
	return manifests.Service{
		Unit:        name,
		UnitFiles:   files.sorted(),
		Binaries:    bins.sorted(),
		Libraries:   libs.sorted(),
		Paths:       paths.sorted(),
		ReloadPaths: reload.sorted(),
	}, nil
}

// strataPath turns an absolute X-Strata path into a tree path.
func strataPath(v string) (string, error) {
	if !strings.HasPrefix(v, "/") {
		return "", fmt.Errorf("%w: %q is not absolute", ErrBadPath, v)
	}
	p := treePath(v)
	if p == "" {
		return "", fmt.Errorf("%w: %q names the whole tree", ErrBadPath, v)
	}
	return p, nil
}

// SetCommands sets the validation and health-check commands of unit in
// cat (nil leaves one unset). The unit must be in the catalog.
func SetCommands(cat *manifests.Catalog, unit string, validate, check []string) error {
	if validate == nil && check == nil {
		return nil
	}
	for i := range cat.Services {
		if s := &cat.Services[i]; s.Unit == unit {
			s.Validate, s.Check = validate, check
			return nil
		}
	}
	return fmt.Errorf("%w %s: validate or check command declared", ErrUnknownUnit, unit)
}

// CarryCommands copies the commands of the services of from onto the
// same units in cat: a catalog rebuilt after a change keeps what the
// recipe declared.
func CarryCommands(cat *manifests.Catalog, from manifests.Catalog) {
	for _, s := range from.Services {
		_ = SetCommands(cat, s.Unit, s.Validate, s.Check)
	}
}
