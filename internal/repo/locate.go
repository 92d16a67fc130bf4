package repo

import (
	"errors"
	"fmt"
	"strings"
)

// ErrRemote reports a command that writes a repository given a URL:
// repositories are published into a directory, which any web server then
// serves.
var ErrRemote = errors.New("a repository URL is read-only; publish into a directory and serve that")

// ErrLocation reports a --repo that names no repository strata can read:
// an unknown scheme, a malformed URL.
var ErrLocation = errors.New("not a repository location")

// Locate returns the store of the repository at loc: an http:// or
// https:// URL (see HTTPStore), an oci:// or oci+http:// reference (see
// OCIStore), or else a local directory.
func Locate(loc string) (Store, error) {
	switch {
	case loc == "":
		return nil, fmt.Errorf("no repository given: %w", ErrLocation)
	case IsURL(loc) && (strings.HasPrefix(loc, "http://") || strings.HasPrefix(loc, "https://")):
		return HTTP(loc)
	case strings.HasPrefix(loc, "oci://"), strings.HasPrefix(loc, "oci+http://"):
		return OCI(loc)
	case IsURL(loc):
		return nil, fmt.Errorf("repository %q: unknown scheme; want a directory, http://, https://, oci:// or oci+http://: %w", loc, ErrLocation)
	}
	return Dir(loc), nil
}

// IsURL reports whether loc names a repository by URL (SCHEME://...)
// rather than by directory.
func IsURL(loc string) bool {
	scheme, _, ok := strings.Cut(loc, "://")
	if !ok || scheme == "" {
		return false
	}
	for _, c := range scheme {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// String returns the repository's directory.
func (d *DirStore) String() string { return d.Dir }

// String returns the spooled store's name.
func (s *Spool) String() string { return fmt.Sprint(s.Store) }
