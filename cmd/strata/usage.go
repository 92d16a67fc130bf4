package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// versionValue is a flag holding a strict semver version: a mistyped one
// (v1.0.1, 1.2) is a usage error that suggests the fix.
type versionValue string

func (v *versionValue) String() string { return string(*v) }
func (v *versionValue) Type() string   { return "VERSION" }
func (v *versionValue) Set(s string) error {
	if err := checkVersion(s); err != nil {
		return err
	}
	*v = versionValue(s)
	return nil
}

// versionVar defines a version flag on c stored in p.
func versionVar(c *cobra.Command, p *string, name, usage string) {
	c.Flags().Var((*versionValue)(p), name, usage)
}

var looseVersion = regexp.MustCompile(`^[vV]?(\d+)(?:\.(\d+))?(?:\.(\d+))?([-+].*)?$`)

// checkVersion refuses what is not a strict semver version, saying what
// was probably meant.
func checkVersion(s string) error {
	if _, err := manifests.ParseVersion(s); err == nil {
		return nil
	}
	hint := "versions are strict semver, MAJOR.MINOR.PATCH (e.g. 1.0.1, 2.0.0-rc.1)"
	if m := looseVersion.FindStringSubmatch(s); m != nil {
		minor, patch := m[2], m[3]
		if minor == "" {
			minor = "0"
		}
		if patch == "" {
			patch = "0"
		}
		try := m[1] + "." + minor + "." + patch + m[4]
		if _, err := manifests.ParseVersion(try); err == nil && try != s {
			hint += "; did you mean " + try + "?"
		}
	}
	return fmt.Errorf("%q: %s", s, hint)
}

// versionArg checks a version given as a positional argument.
func versionArg(s string) error {
	if err := checkVersion(s); err != nil {
		return usageError{fmt.Errorf("version %w", err)}
	}
	return nil
}

// parseAdd parses --add DEST=SRC: DEST an absolute path in the image,
// naming the file itself; SRC a host path. The mistakes people make (the
// two swapped, a relative or trailing-slash DEST) are usage errors with
// the fix.
func parseAdd(a string) (overlay.Add, error) {
	dest, src, ok := strings.Cut(a, "=")
	if !ok || dest == "" || src == "" {
		return overlay.Add{}, usageError{fmt.Errorf("--add %q: want DEST=SRC, the absolute path in the image and the host file to put there (e.g. --add /etc/app.conf=./app.conf)", a)}
	}
	if !strings.HasPrefix(dest, "/") {
		if strings.HasPrefix(src, "/") {
			return overlay.Add{}, usageError{fmt.Errorf("--add %s: DEST %q is not an absolute image path; DEST comes first: did you mean --add %s=%s?", a, dest, src, dest)}
		}
		return overlay.Add{}, usageError{fmt.Errorf("--add %s: DEST %q must be an absolute path in the image, e.g. /%s", a, dest, strings.TrimPrefix(dest, "./"))}
	}
	if err := checkImagePath("--add "+a, dest); err != nil {
		return overlay.Add{}, err
	}
	return overlay.Add{Dest: dest, Src: src}, nil
}

// checkImagePath refuses an image path that is not absolute and clean
// (what for naming the flag).
func checkImagePath(what, p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return usageError{fmt.Errorf("%s: %q must be an absolute path in the image, e.g. /%s", what, p, strings.TrimPrefix(p, "./"))}
	case p == "/":
		return usageError{fmt.Errorf("%s: the image's root itself cannot be replaced or deleted", what)}
	case strings.HasSuffix(p, "/"):
		return usageError{fmt.Errorf("%s: %q names a path with a trailing slash; name the file or directory itself: %s", what, p, strings.TrimRight(p, "/"))}
	case path.Clean(p) != p:
		return usageError{fmt.Errorf("%s: %q is not a clean path; did you mean %s?", what, p, path.Clean(p))}
	}
	return nil
}

// checkTreeDir refuses a --tree that is not a directory.
func checkTreeDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return usageError{fmt.Errorf("--tree %s: %w", dir, err)}
	case !fi.IsDir():
		return usageError{fmt.Errorf("--tree %s: not a directory; --tree lays a directory over the head (to place one file, use --add DEST=%s)", dir, dir)}
	}
	return nil
}

// keyUsage turns the key-loading mistakes of an operator (a missing file,
// a public key) into usage errors.
func keyUsage(err error) error {
	if err != nil && (errors.Is(err, sign.ErrPublicKey) || errors.Is(err, os.ErrNotExist)) {
		return usageError{err}
	}
	return err
}

// imageValue is an --image flag: the squashfs, or the .image.json beside
// it, which stands for the squashfs.
type imageValue string

func (v *imageValue) String() string { return string(*v) }
func (v *imageValue) Type() string   { return "IMAGE" }
func (v *imageValue) Set(s string) error {
	*v = imageValue(repo.ImageFile(s))
	return nil
}

// imageVar defines an --image flag on fs stored in p.
func imageVar(fs *pflag.FlagSet, p *string, usage string) {
	fs.Var((*imageValue)(p), "image", usage)
}

// parseModeOwner parses --mode (octal, at most 07777) and --owner
// (numeric UID:GID) into an Add carrying them.
func parseModeOwner(mode, owner string) (overlay.Add, error) {
	var a overlay.Add
	if mode != "" {
		m, err := strconv.ParseUint(strings.TrimPrefix(mode, "0o"), 8, 32)
		if err != nil || m > 0o7777 {
			return a, usageError{fmt.Errorf("--mode %q: want an octal mode such as 0644 or 0600", mode)}
		}
		a.SetMode, a.Mode = true, manifests.Mode(m)
	}
	if owner != "" {
		u, g, ok := strings.Cut(owner, ":")
		uid, err1 := strconv.ParseUint(u, 10, 31)
		gid, err2 := strconv.ParseUint(g, 10, 31)
		if !ok || err1 != nil || err2 != nil {
			return a, usageError{fmt.Errorf("--owner %q: want numeric UID:GID such as 0:0 or 1000:1000 (names differ between the build host and the image)", owner)}
		}
		a.SetOwner, a.UID, a.GID = true, int(uid), int(gid)
	}
	return a, nil
}
