package builder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/strata-dev/strata/internal/aptsources"
	"github.com/strata-dev/strata/manifests"
)

// ErrNeedRoot reports a build step that needs root (debootstrap, run
// steps).
var ErrNeedRoot = errors.New("this step needs root")

// rulesVersion names strata's rules for cleaning a root tree (see
// cleanRootfs); it is part of every cache key, so changing the rules
// invalidates old entries.
const rulesVersion = "rootfs-rules-3+chroot-2"

// debootstrapInputs is everything a debootstrap base depends on; its
// hash is the cache key.
type debootstrapInputs struct {
	Kind        string   `json:"kind"`
	Suite       string   `json:"suite"`
	Variant     string   `json:"variant"`
	Include     []string `json:"include"`
	Mirror      string   `json:"mirror"`
	Arch        string   `json:"arch"`
	Debootstrap string   `json:"debootstrap"`
	Rules       string   `json:"rules"`
}

// debianArches maps Go architectures to Debian's.
var debianArches = map[string]string{
	"amd64": "amd64", "arm64": "arm64", "386": "i386", "arm": "armhf",
	"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64", "mips64le": "mips64el",
}

// debootstrapBase returns the cached Debian root the options describe,
// running debootstrap (as root, with network) only when the cache lacks
// it.
func debootstrapBase(ctx context.Context, d *Debootstrap, s *settings) (string, []manifests.Entry, error) {
	bin, err := exec.LookPath("debootstrap")
	if err != nil {
		return "", nil, fmt.Errorf("base.debootstrap: debootstrap not found (apt-get install debootstrap): %w", err)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", nil, fmt.Errorf("base.debootstrap: %s --version: %w", bin, err)
	}
	in := debootstrapInputs{Kind: "debootstrap", Suite: d.Suite, Variant: d.Variant, Mirror: d.Mirror, Arch: d.Arch,
		Debootstrap: strings.TrimSpace(string(out)), Rules: rulesVersion}
	in.Include = slices.Compact(slices.Sorted(slices.Values(d.Include)))
	if in.Mirror == "" {
		m, err := aptsources.Mirror(aptsources.Dir, in.Suite)
		if err != nil {
			return "", nil, fmt.Errorf("%w: base.debootstrap.mirror: none set, and %v; set mirror to the archive's URL", ErrRecipe, err)
		}
		in.Mirror = m
	}
	if in.Arch == "" {
		if in.Arch = debianArches[runtime.GOARCH]; in.Arch == "" {
			return "", nil, fmt.Errorf("%w: base.debootstrap.arch: no Debian architecture known for %s; set arch", ErrRecipe, runtime.GOARCH)
		}
	}
	key, err := cacheKey(in)
	if err != nil {
		return "", nil, err
	}
	return cached(ctx, s, "debootstrap", key, in, func(tmp string) error {
		if os.Geteuid() != 0 {
			return fmt.Errorf("base.debootstrap: %w (nothing is cached for these options in %s)", ErrNeedRoot, s.cache())
		}
		args := []string{"--arch=" + in.Arch}
		if in.Variant != "" {
			args = append(args, "--variant="+in.Variant)
		}
		if len(in.Include) > 0 {
			args = append(args, "--include="+strings.Join(in.Include, ","))
		}
		args = append(args, in.Suite, tmp, in.Mirror)
		s.progress(fmt.Sprintf("debootstrap %s %s into %s (not cached yet; this takes minutes)", in.Suite, strings.Join(args[:len(args)-3], " "), tmp))
		err := runLines(isolated(ctx, bin, args...), func(l string) { s.progress("debootstrap: " + l) })
		if err != nil {
			if b, rerr := os.ReadFile(filepath.Join(tmp, "debootstrap", "debootstrap.log")); rerr == nil {
				err = fmt.Errorf("%w\ndebootstrap.log ends:\n%s", err, lastLines(string(b), 15))
			}
			return fmt.Errorf("base.debootstrap: %w", err)
		}
		s.progress("debootstrap done; cleaning the tree")
		return cleanRootfs(tmp, true)
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
