package builder

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/manifests"
)

// ErrRecipe reports a recipe that cannot be used.
var ErrRecipe = errors.New("builder: bad recipe")

// Recipe says how to build an image. See docs/images.md for every key.
type Recipe struct {
	// Line names the sequence the image starts.
	Line string `yaml:"line"`
	// Version is the image's strict semver version.
	Version string `yaml:"version"`
	// Epoch is the fixed timestamp (Unix seconds) of every file and of the
	// manifest; $SOURCE_DATE_EPOCH overrides it.
	Epoch int64 `yaml:"epoch"`
	// Compressor is the squashfs compressor: zstd (default), xz, gzip,
	// lz4 or lzo.
	Compressor string `yaml:"compressor"`
	// Base is the tree the image starts from.
	Base Base `yaml:"base"`
	// Files are added or replaced after the base, in order.
	Files []File `yaml:"files"`
	// Remove lists paths deleted after the files are placed.
	Remove []string `yaml:"remove"`
	// Services declares paths per unit beyond what the catalog infers.
	Services []ServiceDecl `yaml:"services"`
	// Keys are extra public key files (relative to the recipe) the image
	// trusts besides the build key.
	Keys []string `yaml:"keys"`

	dir    string
	digest string
}

// Base is the starting tree of a recipe.
type Base struct {
	// Dir is a directory relative to the recipe. Its files are taken
	// with owner root and modes normalised to 0644/0755 (0755 for
	// directories) unless Preserve is set, so a checkout's umask and owner
	// do not leak into the image.
	Dir string `yaml:"dir"`
	// Preserve keeps the directory's real owners and modes.
	Preserve bool `yaml:"preserve"`
}

// File is one path to place in the image: a file from Src or Content, a
// directory, or a symlink. Mode and Owner apply to all kinds and may also
// adjust a path the base already has.
type File struct {
	Path    string  `yaml:"path"`
	Src     string  `yaml:"src"`
	Content *string `yaml:"content"`
	Dir     bool    `yaml:"dir"`
	Symlink string  `yaml:"symlink"`
	Mode    string  `yaml:"mode"`
	Owner   string  `yaml:"owner"`
}

// ServiceDecl declares the paths of one unit.
type ServiceDecl struct {
	Unit string `yaml:"unit"`
	// Paths restart the unit when they change.
	Paths []string `yaml:"paths"`
	// Reload paths only reload it.
	Reload []string `yaml:"reload"`
}

// LoadRecipe reads and validates a recipe file. Unknown keys, bad
// versions, unsafe paths and missing sources are errors naming the key.
func LoadRecipe(path string) (*Recipe, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading recipe: %w", err)
	}
	r, err := ParseRecipe(b)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", path, err)
	}
	r.dir = filepath.Dir(path)
	r.digest = manifests.Digest(b)
	if r.Base.Dir != "" {
		if fi, err := os.Stat(r.Path(r.Base.Dir)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("recipe %s: base.dir %s: %w: not a directory", path, r.Base.Dir, ErrRecipe)
		}
	}
	for _, f := range r.Files {
		if f.Src != "" {
			if _, err := os.Stat(r.Path(f.Src)); err != nil {
				return nil, fmt.Errorf("recipe %s: files %s: src: %w: %v", path, f.Path, ErrRecipe, err)
			}
		}
	}
	return r, nil
}

// ParseRecipe decodes and validates recipe YAML.
func ParseRecipe(b []byte) (*Recipe, error) {
	var r Recipe
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRecipe, err)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Path resolves a path written in the recipe relative to its directory.
func (r *Recipe) Path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(r.dir, p)
}

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
	for i, f := range r.Files {
		p, err := TreePath(f.Path)
		if err != nil {
			return fmt.Errorf("%w: files[%d].path: %v", ErrRecipe, i, err)
		}
		kinds := 0
		for _, set := range []bool{f.Src != "", f.Content != nil, f.Dir, f.Symlink != ""} {
			if set {
				kinds++
			}
		}
		if kinds > 1 {
			return fmt.Errorf("%w: files %s: set at most one of src, content, dir, symlink", ErrRecipe, f.Path)
		}
		if kinds == 0 && f.Mode == "" && f.Owner == "" {
			return fmt.Errorf("%w: files %s: nothing to do", ErrRecipe, f.Path)
		}
		if f.Symlink != "" {
			if err := manifests.CheckLinkTarget(p, f.Symlink); err != nil {
				return fmt.Errorf("%w: files %s: %v", ErrRecipe, f.Path, err)
			}
		}
		if _, err := parseMode(f.Mode); err != nil {
			return fmt.Errorf("%w: files %s: %v", ErrRecipe, f.Path, err)
		}
		if _, _, err := parseOwner(f.Owner); err != nil {
			return fmt.Errorf("%w: files %s: %v", ErrRecipe, f.Path, err)
		}
	}
	for i, p := range r.Remove {
		if _, err := TreePath(p); err != nil {
			return fmt.Errorf("%w: remove[%d]: %v", ErrRecipe, i, err)
		}
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
	}
	return nil
}

// TreePath turns an absolute image path such as "/etc/x" into the
// tree-relative form "etc/x", refusing relative or unsafe paths.
func TreePath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q must be absolute", manifests.ErrUnsafePath, p)
	}
	rel := strings.TrimPrefix(p, "/")
	if err := manifests.ValidPath(rel); err != nil {
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
