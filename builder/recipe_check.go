package builder

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

func (r *Recipe) validate() error {
	if err := manifests.ValidLine(r.Line); err != nil {
		return fmt.Errorf("%w: line: %v", ErrRecipe, err)
	}
	if _, err := manifests.ParseVersion(r.Version); err != nil {
		return fmt.Errorf("%w: version: %v", ErrRecipe, err)
	}
	if r.Epoch < 0 {
		return fmt.Errorf("%w: epoch %d is negative", ErrRecipe, r.Epoch)
	}
	switch r.Compressor {
	case "", "zstd", "xz", "gzip", "lz4", "lzo":
	default:
		return fmt.Errorf("%w: compressor %q (want zstd, xz, gzip, lz4 or lzo)", ErrRecipe, r.Compressor)
	}
	if err := r.Base.validate(); err != nil {
		return err
	}
	for i, f := range r.Files {
		if err := checkFile(fmt.Sprintf("files[%d]", i), "files", f); err != nil {
			return err
		}
	}
	for i, p := range r.Remove {
		if _, err := TreePath(p); err != nil {
			return fmt.Errorf("%w: remove[%d]: %v", ErrRecipe, i, err)
		}
	}
	for i, st := range r.Steps {
		if err := st.validate(i); err != nil {
			return err
		}
	}
	managed, err := r.managed()
	if err != nil {
		return err
	}
	if _, err := r.data(managed); err != nil {
		return err
	}
	for _, s := range r.Services {
		if !strings.Contains(s.Unit, ".") {
			return fmt.Errorf("%w: services: unit %q needs a suffix such as .service", ErrRecipe, s.Unit)
		}
		for _, p := range append(append([]string{}, s.Paths...), s.Reload...) {
			if _, err := TreePath(p); err != nil {
				return fmt.Errorf("%w: services %s: %v", ErrRecipe, s.Unit, err)
			}
		}
		for key, cmd := range map[string][]string{"validate": s.Validate, "check": s.Check} {
			if cmd == nil {
				continue
			}
			if err := manifests.ValidCommand(cmd); err != nil {
				return fmt.Errorf("%w: services %s: %s: %v", ErrRecipe, s.Unit, key, err)
			}
		}
	}
	return nil
}

// checkFile validates one files item; key is its position ("files[0]"),
// kind how messages name the list ("files").
func checkFile(key, kind string, f File) error {
	p, err := TreePath(f.Path)
	if err != nil {
		return fmt.Errorf("%w: %s.path: %v", ErrRecipe, key, err)
	}
	kinds := 0
	for _, set := range []bool{f.Src != "", f.Content != nil, f.Dir, f.Symlink != ""} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return fmt.Errorf("%w: %s %s: set at most one of src, content, dir, symlink", ErrRecipe, kind, f.Path)
	}
	if kinds == 0 && f.Mode == "" && f.Owner == "" {
		return fmt.Errorf("%w: %s %s: nothing to do", ErrRecipe, kind, f.Path)
	}
	if f.Symlink != "" {
		if err := manifests.CheckLinkTarget(p, f.Symlink); err != nil {
			return fmt.Errorf("%w: %s %s: %v", ErrRecipe, kind, f.Path, err)
		}
	}
	if _, err := parseMode(f.Mode); err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrRecipe, kind, f.Path, err)
	}
	if _, _, err := parseOwner(f.Owner); err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrRecipe, kind, f.Path, err)
	}
	return nil
}

func (b *Base) validate() error {
	var kinds []string
	for _, k := range []struct {
		name string
		set  bool
	}{{"dir", b.Dir != ""}, {"tar", b.Tar != ""}, {"image", b.Image != ""}, {"debootstrap", b.Debootstrap != nil}} {
		if k.set {
			kinds = append(kinds, "base."+k.name)
		}
	}
	if len(kinds) > 1 {
		return fmt.Errorf("%w: base: %s are set; a recipe has exactly one base kind", ErrRecipe, strings.Join(kinds, " and "))
	}
	if b.Preserve && b.Dir == "" {
		return fmt.Errorf("%w: base.preserve applies to base.dir only (tar, image and debootstrap bases always keep owners and modes)", ErrRecipe)
	}
	if b.Image != "" && !strings.HasSuffix(b.Image, ".squashfs") {
		return fmt.Errorf("%w: base.image %q must name a .squashfs image", ErrRecipe, b.Image)
	}
	if d := b.Debootstrap; d != nil {
		return d.validate()
	}
	return nil
}

var (
	debianName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*$`)
	debianArch = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

func (d *Debootstrap) validate() error {
	if !debianName.MatchString(d.Suite) {
		return fmt.Errorf("%w: base.debootstrap.suite %q must be a Debian suite name such as bookworm", ErrRecipe, d.Suite)
	}
	switch d.Variant {
	case "", "minbase", "buildd", "fakechroot":
	default:
		return fmt.Errorf("%w: base.debootstrap.variant %q (want minbase, buildd, fakechroot or none)", ErrRecipe, d.Variant)
	}
	for i, p := range d.Include {
		if !debianName.MatchString(p) {
			return fmt.Errorf("%w: base.debootstrap.include[%d]: %q is not a Debian package name", ErrRecipe, i, p)
		}
	}
	if d.Mirror != "" && !strings.HasPrefix(d.Mirror, "http://") && !strings.HasPrefix(d.Mirror, "https://") && !strings.HasPrefix(d.Mirror, "file:///") {
		return fmt.Errorf("%w: base.debootstrap.mirror %q must be an http://, https:// or file:/// URL", ErrRecipe, d.Mirror)
	}
	if d.Arch != "" && !debianArch.MatchString(d.Arch) {
		return fmt.Errorf("%w: base.debootstrap.arch %q is not a Debian architecture", ErrRecipe, d.Arch)
	}
	return nil
}

func (st Step) validate(i int) error {
	key := fmt.Sprintf("steps[%d]", i)
	n := 0
	for _, set := range []bool{st.Copy != nil, st.Remove != "", st.Run != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: %s: set exactly one of copy, remove, run", ErrRecipe, key)
	}
	switch {
	case st.Network != "" && st.Run == "":
		return fmt.Errorf("%w: %s.network: only a run step has a network", ErrRecipe, key)
	case st.Network != "" && st.Network != NetworkHost && st.Network != NetworkNone:
		return fmt.Errorf("%w: %s.network %q: want %q or %q", ErrRecipe, key, st.Network, NetworkHost, NetworkNone)
	}
	switch {
	case st.Copy != nil:
		return checkFile(key+".copy", key+".copy", *st.Copy)
	case st.Remove != "":
		if _, err := TreePath(st.Remove); err != nil {
			return fmt.Errorf("%w: %s.remove: %v", ErrRecipe, key, err)
		}
	case strings.ContainsRune(st.Run, 0):
		return fmt.Errorf("%w: %s.run: command contains NUL", ErrRecipe, key)
	}
	return nil
}

// checkHostPaths checks that the host files the recipe names exist.
func (r *Recipe) checkHostPaths() error {
	b := r.Base
	if b.Dir != "" {
		if fi, err := os.Stat(r.Path(b.Dir)); err != nil || !fi.IsDir() {
			return fmt.Errorf("base.dir %s: %w: not a directory", b.Dir, ErrRecipe)
		}
	}
	for _, k := range [][2]string{{"base.tar", b.Tar}, {"base.image", b.Image}} {
		if k[1] == "" {
			continue
		}
		if fi, err := os.Stat(r.Path(k[1])); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%s %s: %w: not a regular file", k[0], k[1], ErrRecipe)
		}
	}
	files := append([]File{}, r.Files...)
	for _, st := range r.Steps {
		if st.Copy != nil {
			files = append(files, *st.Copy)
		}
	}
	for _, f := range files {
		if f.Src != "" {
			if _, err := os.Stat(r.Path(f.Src)); err != nil {
				return fmt.Errorf("files %s: src: %w: %v", f.Path, ErrRecipe, err)
			}
		}
	}
	if r.Strata != nil && r.Strata.Binary != "" {
		if fi, err := os.Stat(r.Path(r.Strata.Binary)); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("strata.binary %s: %w: not a regular file", r.Strata.Binary, ErrRecipe)
		}
	}
	return nil
}

// TreePath is manifests.ImagePath for recipes, which also may not name
// strata's node state.
func TreePath(p string) (string, error) {
	rel, err := manifests.ImagePath(p)
	if err != nil {
		return "", err
	}
	if manifests.IsNodeState(rel) {
		return "", fmt.Errorf("%w: %s is strata node state", manifests.ErrUnsafePath, p)
	}
	return rel, nil
}

func parseMode(s string) (manifests.Mode, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 07777 {
		return 0, fmt.Errorf("mode %q is not an octal permission value", s)
	}
	return manifests.Mode(v), nil
}

func parseOwner(s string) (int, int, error) {
	if s == "" {
		return 0, 0, nil
	}
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("owner %q must be numeric UID:GID", s)
	}
	return uid, gid, nil
}

// managed returns the recipe's managed hierarchies as tree paths (nil:
// the defaults).
func (r *Recipe) managed() ([]string, error) {
	var out []string
	for i, h := range r.Hierarchies {
		rel, err := TreePath(h)
		if err != nil {
			return nil, fmt.Errorf("%w: hierarchies[%d]: %v", ErrRecipe, i, err)
		}
		out = append(out, rel)
	}
	if err := manifests.ValidHierarchies(out); err != nil {
		return nil, fmt.Errorf("%w: hierarchies: %v", ErrRecipe, err)
	}
	return out, nil
}

// data returns the recipe's declared data directories as tree paths,
// sorted, checked against its managed hierarchies.
func (r *Recipe) data(managed []string) ([]string, error) {
	var out []string
	for i, d := range r.Data {
		rel, err := TreePath(d)
		if err != nil {
			return nil, fmt.Errorf("%w: data[%d]: %v", ErrRecipe, i, err)
		}
		out = append(out, rel)
	}
	sort.Strings(out)
	if err := manifests.ValidData(out, managed); err != nil {
		return nil, fmt.Errorf("%w: data: %v", ErrRecipe, err)
	}
	return out, nil
}
