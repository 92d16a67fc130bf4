package manifests

import "fmt"

// Patch says that the payload member of a file entry holds not the file's
// content but a patch (a zstd frame with the content the path had before
// the overlay as its raw dictionary, see internal/patch). A reader
// rebuilds the file from the content it has for the path, which must
// have SHA-256 Base, and checks the entry's own size and SHA-256.
type Patch struct {
	// Path is the file entry the patch rebuilds.
	Path string `json:"path"`
	// Base is the bare-hex SHA-256 of the content the patch was made
	// against: the path's content in the tree before the overlay.
	Base string `json:"base"`
	// Size and SHA256 are those of the payload member (the patch bytes),
	// checked before the patch is decoded.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// MaxPatchTarget is the largest file an overlay may ship as a patch (and
// the largest content a patch may be made against): both are held in
// memory to rebuild it.
const MaxPatchTarget = 64 << 20

// validPatches checks m.Patches: sorted, one per path, each for a file
// entry of m no larger than MaxPatchTarget, and each smaller than the
// content it stands for.
func validPatches(m *OverlayManifest) error {
	if len(m.Patches) == 0 {
		return nil
	}
	files := make(map[string]Entry, len(m.Entries))
	for _, e := range m.Entries {
		if e.Type == TypeFile {
			files[e.Path] = e
		}
	}
	for i, p := range m.Patches {
		e, ok := files[p.Path]
		switch {
		case !ok:
			return fmt.Errorf("%w: overlay %s: patch for %q, which is not a file the overlay writes", ErrInvalid, m.Version, p.Path)
		case i > 0 && m.Patches[i-1].Path >= p.Path:
			return fmt.Errorf("%w: overlay %s: patch for %s duplicated or unsorted", ErrInvalid, m.Version, p.Path)
		case !validHex(p.Base, 64) || !validHex(p.SHA256, 64):
			return fmt.Errorf("%w: overlay %s: patch for %s: base and sha256 must be 64 hex digits", ErrInvalid, m.Version, p.Path)
		case e.Size > MaxPatchTarget:
			return fmt.Errorf("%w: overlay %s: patch for %s of %d bytes (a patch rebuilds at most %d)", ErrInvalid, m.Version, p.Path, e.Size, MaxPatchTarget)
		case p.Size <= 0 || p.Size >= e.Size:
			return fmt.Errorf("%w: overlay %s: patch for %s is %d bytes, for a file of %d (a patch must be smaller)", ErrInvalid, m.Version, p.Path, p.Size, e.Size)
		}
	}
	return nil
}

// PatchFor returns the patch for path, if the overlay ships that file as
// one.
func (m *OverlayManifest) PatchFor(path string) (Patch, bool) {
	for _, p := range m.Patches {
		if p.Path == path {
			return p, true
		}
	}
	return Patch{}, false
}

// Carries reports whether the overlay has an entry at path (written,
// whether whole or as a patch; a delete is not an entry).
func (m *OverlayManifest) Carries(path string) bool {
	for _, e := range m.Entries {
		if e.Path == path {
			return true
		}
	}
	return false
}
