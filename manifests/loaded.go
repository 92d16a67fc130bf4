package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"
)

// KindLoaded marks the record of what a node's services loaded
// (LoadedPath).
const KindLoaded = "loaded"

// LoadedPath is where a node records the config each unit loaded when
// strata last restarted or reloaded it, below the node root.
const LoadedPath = StateDir + "/loaded.json"

// Bounds of a loaded record read from node state.
const (
	maxLoadedUnits = 4096
	// MaxConfigSet bounds the files of one unit's config set.
	MaxConfigSet = 10000
)

// Loaded records, per unit, the config set a unit loaded when strata
// last restarted or reloaded it: what the service runs with, as far as
// strata made it so.
type Loaded struct {
	Schema int                   `json:"schema"`
	Kind   string                `json:"kind"`
	Units  map[string]LoadedUnit `json:"units"`
}

// LoadedUnit is one unit's loaded config set.
type LoadedUnit struct {
	// Files is the config set as it was on disk right after the restart
	// or reload (ConfigSet).
	Files ConfigSet `json:"files"`
	// At is when (RFC 3339, nanoseconds).
	At string `json:"at"`
	// By names what restarted or reloaded the unit ("restart", "apply
	// 1.2.0", ...).
	By string `json:"by"`
	// InvocationID is systemd's id of the unit's run that loaded it,
	// where the service manager told it.
	InvocationID string `json:"invocation_id,omitempty"`
}

// ConfigSet is a unit's configuration as files: tree path to what the
// path holds, a regular file's SHA-256 in hex, "link:TARGET" for a
// symbolic link, "type:NAME" for anything else. A path that does not
// exist is absent.
type ConfigSet map[string]string

// Digest is the config set's digest: one SHA-256 over its paths in byte
// order, each as path NUL value LF.
func (s ConfigSet) Digest() string {
	paths := make([]string, 0, len(s))
	for p := range s {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write([]byte(s[p]))
		h.Write([]byte{'\n'})
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// Differ lists the paths whose content s and o do not agree on (one has
// it and the other not, or they hold different things), sorted.
func (s ConfigSet) Differ(o ConfigSet) []string {
	var out []string
	for p, v := range s {
		if w, ok := o[p]; !ok || w != v {
			out = append(out, p)
		}
	}
	for p := range o {
		if _, ok := s[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Validate checks a config set read from node state.
func (s ConfigSet) Validate() error {
	if len(s) > MaxConfigSet {
		return fmt.Errorf("%w: a config set of %d files (at most %d)", ErrInvalid, len(s), MaxConfigSet)
	}
	for p, v := range s {
		if err := ValidPath(p); err != nil {
			return err
		}
		switch {
		case validHex(v, 64):
		case strings.HasPrefix(v, "link:") && len(v) <= 5+4096 && !strings.ContainsRune(v, 0):
		case strings.HasPrefix(v, "type:") && len(v) <= 32:
		default:
			return fmt.Errorf("%w: config set: %s holds %q", ErrInvalid, p, clip(v))
		}
	}
	return nil
}

// Validate checks a loaded record read from node state.
func (l *Loaded) Validate() error {
	if l.Schema != Schema || l.Kind != KindLoaded {
		return fmt.Errorf("%w: not a loaded record (schema %d, kind %q)", ErrInvalid, l.Schema, l.Kind)
	}
	if len(l.Units) > maxLoadedUnits {
		return fmt.Errorf("%w: loaded record: %d units (at most %d)", ErrInvalid, len(l.Units), maxLoadedUnits)
	}
	for unit, u := range l.Units {
		if !ValidUnit(unit) {
			return fmt.Errorf("%w: loaded record: unit %q", ErrInvalid, clip(unit))
		}
		if err := u.Files.Validate(); err != nil {
			return fmt.Errorf("loaded record of %s: %w", unit, err)
		}
		if _, err := time.Parse(time.RFC3339Nano, u.At); err != nil {
			return fmt.Errorf("%w: loaded record of %s: at %q", ErrInvalid, unit, clip(u.At))
		}
		if err := ValidReason("loaded record of "+unit, u.By); err != nil {
			return err
		}
		if u.InvocationID != "" && !validHex(u.InvocationID, 32) {
			return fmt.Errorf("%w: loaded record of %s: invocation id %q", ErrInvalid, unit, clip(u.InvocationID))
		}
	}
	return nil
}
