package builder

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/strata-dev/strata/internal/decodeerr"
	"github.com/strata-dev/strata/manifests"
)

// ErrRecipe reports a recipe that cannot be used (of the
// manifests.ErrRejected class).
var ErrRecipe = manifests.Rejection("bad recipe")

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
	// Hierarchies are the managed hierarchies, absolute top-level
	// directories such as /etc (default /etc, /usr, /opt): overlays of
	// the line may change only these, and a node that boots the image
	// stacks them.
	Hierarchies []string `yaml:"hierarchies"`
	// Data are absolute directories where the node's services keep
	// their own data, beside /var: no audit judges what is below them.
	// Outside the managed hierarchies.
	Data []string `yaml:"data"`
	// Steps run in order after Files and Remove: copies, removals and
	// commands run inside the tree.
	Steps []Step `yaml:"steps"`
	// Keys are extra public key files (relative to the recipe) the image
	// trusts besides the build key.
	Keys []string `yaml:"keys"`
	// Strata, when set, bakes the strata binary and its units in.
	Strata *Strata `yaml:"strata"`

	dir    string
	digest string
}

// Base is the starting tree of a recipe: at most one of Dir, Tar, Image
// and Debootstrap (none: an empty tree).
type Base struct {
	// Dir is a directory relative to the recipe. Its files are taken
	// with owner root and modes normalised to 0644/0755 (0755 for
	// directories) unless Preserve is set, so a checkout's umask and owner
	// do not leak into the image.
	Dir string `yaml:"dir"`
	// Preserve keeps the directory's real owners and modes (Dir only;
	// the other bases always keep them).
	Preserve bool `yaml:"preserve"`
	// Tar is a root file system tarball (uncompressed, gzip, zstd or xz).
	Tar string `yaml:"tar"`
	// Image is another strata image (.squashfs with its signed manifest
	// beside it) that this recipe layers on.
	Image string `yaml:"image"`
	// Debootstrap bootstraps a Debian root, cached by its options.
	Debootstrap *Debootstrap `yaml:"debootstrap"`
}

// Debootstrap are the options of a debootstrap base. Every option is part
// of the cache key.
type Debootstrap struct {
	// Suite is the Debian suite or code name, such as bookworm.
	Suite string `yaml:"suite"`
	// Variant is a debootstrap variant (minbase, buildd, fakechroot) or
	// empty for the default.
	Variant string `yaml:"variant"`
	// Include lists extra packages (their dependencies come along).
	Include []string `yaml:"include"`
	// Mirror is the archive URL (default: the build host's own archive for
	// the suite, from its apt sources; see internal/aptsources).
	Mirror string `yaml:"mirror"`
	// Arch is the Debian architecture (default: the build host's).
	Arch string `yaml:"arch"`
}

// Step is one item of a recipe's steps: exactly one of Copy (a files item),
// Remove (an image path) and Run (a shell command run with the tree as its
// root, in a sandbox; see docs/images.md).
type Step struct {
	Copy   *File  `yaml:"copy"`
	Remove string `yaml:"remove"`
	Run    string `yaml:"run"`
	// Network is a run step's network: "host" (the default: the build
	// host's, to fetch packages) or "none" (a namespace of its own with
	// only loopback, where any port may be bound: a config check that
	// binds its service's ports).
	Network string `yaml:"network" json:"network,omitempty"`
}

// Run step networks (Step.Network).
const (
	NetworkHost = "host"
	NetworkNone = "none"
)

// Strata bakes the strata binary (at /usr/bin/strata) and its systemd
// units into the image.
type Strata struct {
	// Binary is the strata executable to bake in (relative to the recipe);
	// empty means the running executable.
	Binary string `yaml:"binary"`
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
	// Validate checks the unit's configuration (argv, for example
	// [/usr/sbin/nginx, -t]); a live node runs it on a changed tree before
	// switching to it.
	Validate []string `yaml:"validate"`
	// Check tells whether the running unit is healthy (argv); a live node
	// runs it after restarting the unit.
	Check []string `yaml:"check"`
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
	if err := r.checkHostPaths(); err != nil {
		return nil, fmt.Errorf("recipe %s: %w", path, err)
	}
	return r, nil
}

// ParseRecipe decodes and validates recipe YAML.
func ParseRecipe(b []byte) (*Recipe, error) {
	var r Recipe
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRecipe, decodeerr.YAML(err))
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
