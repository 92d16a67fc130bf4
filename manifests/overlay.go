package manifests

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Requires holds an overlay's dependency constraints.
type Requires struct {
	// Image is a semver constraint the node's base image version must
	// satisfy, for example "^1.0.0".
	Image string `json:"image"`
}

// OverlayManifest describes one overlay: where it sits in its line, what it
// changes, which services it touches and the tree it leaves behind.
type OverlayManifest struct {
	Schema  int    `json:"schema"`
	Kind    string `json:"kind"`
	Line    string `json:"line"`
	Version string `json:"version"`
	// Parent is the previous overlay of the line, or the line's image for
	// the first overlay; Digest is the digest of that manifest's bytes.
	Parent Ref `json:"parent"`
	// Lineage lists every ancestor from the line's image to the parent,
	// oldest first, so a node can name every version it is missing.
	Lineage  []Ref    `json:"lineage"`
	Requires Requires `json:"requires"`
	// Entries are the added or changed tree entries, sorted by path; each
	// file entry has a payload member of the same path.
	Entries []Entry `json:"entries"`
	// Deletes are paths removed (with everything below them), sorted.
	Deletes []string `json:"deletes"`
	// Patches lists the file entries whose payload member is a patch
	// against the path's previous content, sorted by path.
	Patches []Patch `json:"patches,omitempty"`
	// Services is the restart plan the overlay calls for.
	Services []ServiceAction `json:"services"`
	// Unclaimed are changed paths no service claims: they restart nothing.
	Unclaimed []string `json:"unclaimed"`
	// Catalog is the line's service catalog after this overlay, set when
	// the overlay changed it.
	Catalog *Catalog `json:"catalog,omitempty"`
	// Keys is set on a key rotation overlay only: the keys it adds to and
	// revokes from those the line trusts, for everything after it.
	Keys *Rotation `json:"keys,omitempty"`
	// TreeDigest is the digest of the node tree after the overlay applies.
	TreeDigest string `json:"tree_digest"`
	Created    string `json:"created"`
	// ValidationSkipped is why the publisher did not run the validation
	// commands of the services the overlay restarts or reloads (overlay
	// create --skip-validation); empty when it ran them. Nodes validate
	// all the same.
	ValidationSkipped string `json:"validation_skipped,omitempty"`
	// Reverts is the overlay this one undoes (overlay revert), an
	// earlier one of the line.
	Reverts *Ref `json:"reverts,omitempty"`
	// Layer is the layer image of the overlay (package layer): what every
	// overlayfs node that applies it writes, byte for byte, and checks its
	// own image against. Overlays published before layer images have
	// none.
	Layer *LayerImage `json:"layer,omitempty"`
}

// MaxReasonLen bounds a reason recorded in a signed manifest (such as
// OverlayManifest.ValidationSkipped), in bytes.
const MaxReasonLen = 500

// ValidReason checks a reason an operator gives for a manifest: not blank,
// at most MaxReasonLen bytes of UTF-8, one line of printable characters.
func ValidReason(what, s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("%w: %s: an empty reason", ErrInvalid, what)
	case len(s) > MaxReasonLen:
		return fmt.Errorf("%w: %s: a reason of %d bytes (at most %d)", ErrInvalid, what, len(s), MaxReasonLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s: a reason that is not UTF-8", ErrInvalid, what)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s: a reason with the unprintable character %U", ErrInvalid, what, r)
		}
	}
	return nil
}

// Validate checks the manifest's schema, versions, lineage, entries and
// plan.
func (m *OverlayManifest) Validate() error {
	if m.Schema != Schema || m.Kind != KindOverlay {
		return fmt.Errorf("%w: not an overlay manifest (schema %d, kind %q)", ErrInvalid, m.Schema, m.Kind)
	}
	if err := ValidLine(m.Line); err != nil {
		return err
	}
	if err := CheckGreater(m.Version, m.Parent.Version); err != nil {
		return err
	}
	if i := strings.IndexByte(m.Version, '+'); i >= 0 {
		return fmt.Errorf("%w: overlay version %s has build metadata, which semver ignores when ordering versions (it equals %s); use a prerelease or the next patch", ErrInvalid, m.Version, m.Version[:i])
	}
	if !ValidDigest(m.Parent.Digest) || !ValidDigest(m.TreeDigest) {
		return fmt.Errorf("%w: overlay %s: bad parent or tree digest", ErrInvalid, m.Version)
	}
	if m.Catalog != nil {
		if err := m.Catalog.Validate(); err != nil {
			return fmt.Errorf("overlay %s: %w", m.Version, err)
		}
	}
	if m.ValidationSkipped != "" {
		if err := ValidReason("overlay "+m.Version+": validation_skipped", m.ValidationSkipped); err != nil {
			return err
		}
	}
	if m.Layer != nil {
		if err := m.Layer.Validate(); err != nil {
			return fmt.Errorf("overlay %s: %w", m.Version, err)
		}
	}
	if r := m.Reverts; r != nil {
		if _, err := ParseVersion(r.Version); err != nil {
			return fmt.Errorf("overlay %s: reverts: %w", m.Version, err)
		}
		if !ValidDigest(r.Digest) || CompareVersions(r.Version, m.Version) >= 0 {
			return fmt.Errorf("%w: overlay %s: reverts %s %q: not an earlier overlay", ErrInvalid, m.Version, clip(r.Version), clip(r.Digest))
		}
	}
	if len(m.Lineage) == 0 || m.Lineage[len(m.Lineage)-1] != m.Parent {
		return fmt.Errorf("%w: overlay %s: lineage must end at the parent", ErrInvalid, m.Version)
	}
	for i, r := range m.Lineage {
		if !ValidDigest(r.Digest) {
			return fmt.Errorf("%w: overlay %s: lineage digest %q", ErrInvalid, m.Version, r.Digest)
		}
		if i > 0 {
			if err := CheckGreater(r.Version, m.Lineage[i-1].Version); err != nil {
				return fmt.Errorf("overlay %s lineage: %w", m.Version, err)
			}
		}
	}
	if _, err := ParseConstraint(m.Requires.Image); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, m.Created); err != nil {
		return fmt.Errorf("%w: overlay %s: created %q is not RFC 3339", ErrInvalid, m.Version, m.Created)
	}
	if len(m.Entries) == 0 && len(m.Deletes) == 0 {
		return fmt.Errorf("%w: overlay %s changes nothing", ErrInvalid, m.Version)
	}
	if err := validEntries(m.Entries); err != nil {
		return err
	}
	if err := validPatches(m); err != nil {
		return err
	}
	for _, e := range m.Entries {
		if IsProtected(e.Path) && e.Type != TypeDir {
			return fmt.Errorf("%w: overlay %s makes /%s a %s; strata needs a directory there", ErrUnsafePath, m.Version, e.Path, e.Type)
		}
		if IsProtected(e.Path) && (e.UID != 0 || e.GID != 0 || uint32(e.Mode)&0o7777 != 0o755) {
			return fmt.Errorf("%w: overlay %s makes /%s %04o owned by %d:%d; the directories holding strata's own files stay 0755 and root's", ErrUnsafePath, m.Version, e.Path, uint32(e.Mode), e.UID, e.GID)
		}
		if Within(e.Path, KeysDir) && e.Path != KeysDir && m.Keys == nil {
			return fmt.Errorf("%w: overlay %s writes /%s: the keys a node trusts change only by key rotation, never as tree content", ErrUnsafePath, m.Version, e.Path)
		}
	}
	changed := make(map[string]bool, len(m.Entries))
	for _, e := range m.Entries {
		changed[e.Path] = true
	}
	for i, d := range m.Deletes {
		if err := ValidPath(d); err != nil {
			return err
		}
		if HoldsStrata(d) || Within(d, KeysDir) && m.Keys == nil {
			return fmt.Errorf("%w: overlay %s deletes /%s, which holds strata's own files", ErrUnsafePath, m.Version, d)
		}
		if changed[d] || i > 0 && m.Deletes[i-1] >= d {
			return fmt.Errorf("%w: overlay %s: delete %s duplicated, unsorted or also changed", ErrInvalid, m.Version, d)
		}
	}
	for _, s := range m.Services {
		if !ValidUnit(s.Unit) || (s.Action != ActionRestart && s.Action != ActionReload && s.Action != ActionStop) {
			return fmt.Errorf("%w: overlay %s: service action %q for %q", ErrInvalid, m.Version, s.Action, s.Unit)
		}
		if err := printable("service "+s.Unit+" because", s.Because); err != nil {
			return fmt.Errorf("overlay %s: %w", m.Version, err)
		}
	}
	if err := printable("unclaimed", m.Unclaimed); err != nil {
		return fmt.Errorf("overlay %s: %w", m.Version, err)
	}
	if m.Keys != nil {
		return m.Keys.validate(m)
	}
	return nil
}

// LineageWindow is how many ancestors an overlay manifest lists at most:
// the nearest, ending at the parent. A full lineage grew every manifest
// with its line (and made reading a line quadratic); the parent link
// chains the rest. Manifests with a longer lineage still validate.
const LineageWindow = 64

// WindowLineage returns the last LineageWindow refs of a line's lineage.
func WindowLineage(refs []Ref) []Ref {
	if len(refs) > LineageWindow {
		refs = refs[len(refs)-LineageWindow:]
	}
	return append([]Ref(nil), refs...)
}

// Ancestors returns the versions of Lineage strictly after version from,
// up to and including the parent. It is how a node names the overlays it
// is missing. If from is not in the lineage, every lineage version newer
// than from is returned (a lineage window may start after it; then more
// are missing than it names, and Complete reports false).
func (m *OverlayManifest) Ancestors(from string) []string {
	var out []string
	found := false
	for _, r := range m.Lineage {
		if found {
			out = append(out, r.Version)
		}
		if r.Version == from {
			found = true
		}
	}
	if !found {
		for _, r := range m.Lineage {
			if CompareVersions(r.Version, from) > 0 {
				out = append(out, r.Version)
			}
		}
	}
	return out
}

// Covers reports whether the lineage reaches back to version v (lists it
// or anything older), so that whether v is an ancestor can be told from
// the manifest alone.
func (m *OverlayManifest) Covers(v string) bool {
	return len(m.Lineage) > 0 && CompareVersions(m.Lineage[0].Version, v) <= 0
}
