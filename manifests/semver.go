package manifests

import (
	"fmt"

	"github.com/Masterminds/semver/v3"
)

// ParseVersion parses a strict semantic version ("1.2.3", "1.2.3-rc.1",
// "1.2.3+build"). A leading "v" and partial versions such as "1.2" are
// refused.
func ParseVersion(s string) (*semver.Version, error) {
	v, err := semver.StrictNewVersion(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q is not strict semver (MAJOR.MINOR.PATCH): %v", ErrVersion, s, err)
	}
	return v, nil
}

// CheckGreater returns an error unless version v is strictly greater than
// parent in semver precedence.
func CheckGreater(v, parent string) error {
	nv, err := ParseVersion(v)
	if err != nil {
		return err
	}
	pv, err := ParseVersion(parent)
	if err != nil {
		return err
	}
	if !nv.GreaterThan(pv) {
		return fmt.Errorf("%w: version %s is not greater than its parent %s", ErrVersion, v, parent)
	}
	return nil
}

// CompareVersions orders two valid versions by semver precedence.
func CompareVersions(a, b string) int {
	va, errA := ParseVersion(a)
	vb, errB := ParseVersion(b)
	if errA != nil || errB != nil {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	return va.Compare(vb)
}

// ParseConstraint parses a semver constraint such as "^1.0.0" or
// ">= 1.2, < 2".
func ParseConstraint(s string) (*semver.Constraints, error) {
	c, err := semver.NewConstraint(s)
	if err != nil {
		return nil, fmt.Errorf("%w: constraint %q: %v", ErrVersion, s, err)
	}
	return c, nil
}

// Satisfies reports whether version v meets constraint c. Build metadata
// of v is ignored, as semver precedence demands.
func Satisfies(v, c string) (bool, error) {
	ver, err := ParseVersion(v)
	if err != nil {
		return false, err
	}
	cons, err := ParseConstraint(c)
	if err != nil {
		return false, err
	}
	plain, err := ver.SetMetadata("")
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrVersion, err)
	}
	return cons.Check(&plain), nil
}
