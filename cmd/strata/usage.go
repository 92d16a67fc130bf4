package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
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
	if err := manifests.ValidPath(strings.TrimPrefix(p, "/")); err != nil {
		return usageError{fmt.Errorf("%s: %w", what, err)}
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

// setModesOwners applies --mode and --owner to adds. A bare value
// (0600, 0:113, www-data:www-data) applies to every --add that has none
// of its own; DEST=VALUE applies to the --add of DEST alone. Owners are
// numbers or names; names are resolved by overlay create with the
// /etc/passwd and /etc/group of the line's head, as the nodes will.
func setModesOwners(adds []overlay.Add, modes, owners []string) error {
	if len(adds) == 0 && len(modes)+len(owners) > 0 {
		return usageError{fmt.Errorf("--mode and --owner apply to --add (with --tree the files' own modes and owners count)")}
	}
	set := func(flag string, values []string, apply func(a *overlay.Add, v string) error) error {
		bare := ""
		done := map[string]bool{}
		for _, v := range values {
			dest, val, keyed := "", v, false
			if strings.HasPrefix(v, "/") {
				if k := strings.LastIndex(v, "="); k > 0 {
					dest, val, keyed = v[:k], v[k+1:], true
				}
			}
			if !keyed {
				if bare != "" {
					return usageError{fmt.Errorf("%s %s and %s %s: give one for every --add, or DEST=VALUE for each", flag, bare, flag, v)}
				}
				bare = v
				continue
			}
			i := slices.IndexFunc(adds, func(a overlay.Add) bool { return a.Dest == dest })
			if i < 0 {
				var dests []string
				for _, a := range adds {
					dests = append(dests, a.Dest)
				}
				return usageError{fmt.Errorf("%s %s: no --add has DEST %s (the --add DESTs: %s)", flag, v, dest, strings.Join(dests, ", "))}
			}
			if done[dest] {
				return usageError{fmt.Errorf("%s: %s is given twice", flag, dest)}
			}
			done[dest] = true
			if err := apply(&adds[i], val); err != nil {
				return err
			}
		}
		if bare == "" {
			return nil
		}
		for i := range adds {
			if !done[adds[i].Dest] {
				if err := apply(&adds[i], bare); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := set("--mode", modes, func(a *overlay.Add, v string) error {
		m, err := strconv.ParseUint(strings.TrimPrefix(v, "0o"), 8, 32)
		if err != nil || m > 0o7777 {
			return usageError{fmt.Errorf("--mode %q: want an octal mode such as 0644 or 0600", v)}
		}
		a.SetMode, a.Mode = true, manifests.Mode(m)
		return nil
	}); err != nil {
		return err
	}
	return set("--owner", owners, func(a *overlay.Add, v string) error {
		u, g, ok := strings.Cut(v, ":")
		uid, user, err1 := ownerPart(u)
		gid, group, err2 := ownerPart(g)
		if !ok || err1 != nil || err2 != nil {
			return usageError{fmt.Errorf("--owner %q: want USER:GROUP, each a number or a name the line's image knows, such as 0:0, 1000:1000 or www-data:www-data", v)}
		}
		a.SetOwner, a.UID, a.GID, a.User, a.Group = true, uid, gid, user, group
		return nil
	})
}

// ownerName is a user or group name as useradd accepts it.
var ownerName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)

// ownerPart parses one side of --owner: a number (id) or a name.
func ownerPart(s string) (int, string, error) {
	if n, err := strconv.ParseUint(s, 10, 31); err == nil {
		return int(n), "", nil
	}
	if !ownerName.MatchString(s) {
		return 0, "", fmt.Errorf("bad owner %q", s)
	}
	return 0, s, nil
}

// goParseErrors are the parsers' own words in pflag's messages, and what
// an operator reads instead.
var goParseErrors = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`strconv\.Parse(Int|Uint): parsing "[^"]*": invalid syntax`), "want a whole number"},
	{regexp.MustCompile(`strconv\.Parse(Int|Uint|Float): parsing "[^"]*": value out of range`), "out of range"},
	{regexp.MustCompile(`strconv\.ParseFloat: parsing "[^"]*": invalid syntax`), "want a number"},
	{regexp.MustCompile(`strconv\.ParseBool: parsing "[^"]*": invalid syntax`), "want true or false"},
	{regexp.MustCompile(`time: (invalid|missing unit in) duration "[^"]*"`), "want a duration such as 30s, 5m or 2h30m"},
	{regexp.MustCompile(`time: unknown unit "[^"]*" in duration "[^"]*"`), "want a duration such as 30s, 5m or 2h30m"},
}

// plainFlagError rewrites a flag value error (invalid argument "x" for
// "--tries" flag: strconv.ParseInt: ...) in an operator's words.
func plainFlagError(err error) error {
	msg := err.Error()
	out := msg
	for _, p := range goParseErrors {
		out = p.re.ReplaceAllString(out, p.with)
	}
	if out == msg {
		return err
	}
	return usageError{errors.New(out)}
}

// checkAddsDeletes refuses --add and --delete that contradict each other:
// a DEST given twice, a path deleted twice, or added at or below a path
// deleted.
func checkAddsDeletes(adds []overlay.Add, deletes []string) error {
	seen := map[string]bool{}
	for _, a := range adds {
		if seen[a.Dest] {
			return usageError{fmt.Errorf("--add %s is given twice; give each DEST once", a.Dest)}
		}
		seen[a.Dest] = true
	}
	gone := map[string]bool{}
	for _, d := range deletes {
		if gone[d] {
			return usageError{fmt.Errorf("--delete %s is given twice", d)}
		}
		for _, e := range deletes {
			if strings.HasPrefix(d, e+"/") {
				return usageError{fmt.Errorf("--delete %s and --delete %s: deleting %s deletes what is below it; give it alone", e, d, e)}
			}
		}
		gone[d] = true
		for _, a := range adds {
			if a.Dest == d || strings.HasPrefix(a.Dest, d+"/") {
				return usageError{fmt.Errorf("--delete %s and --add %s: a path cannot be deleted and added in one overlay (to replace it, --add alone)", d, a.Dest)}
			}
		}
	}
	return nil
}

// overlayVersion refuses a --version for a new overlay with build
// metadata: semver ignores it when ordering, so 1.0.9+b1 would take
// 1.0.9's place in the sequence.
func overlayVersion(flag, v string) error {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		use := "a prerelease such as " + v[:i] + "-rc.1 or the next patch"
		if strings.Contains(v[:i], "-") {
			use = "the next prerelease or patch"
		}
		return usageError{fmt.Errorf("%s %s: build metadata (%s) does not order versions (%s+anything equals %s); use %s", flag, v, v[i:], v[:i], v[:i], use)}
	}
	return nil
}
