package manifests

import "fmt"

// Index is a repository's signed table of contents.
type Index struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
	Lines  []Line `json:"lines"`
}

// Line is one image and the overlays that follow it, in order.
type Line struct {
	Name     string       `json:"name"`
	Image    ImageRef     `json:"image"`
	Overlays []OverlayRef `json:"overlays"`
}

// ImageRef locates an image in a repository.
type ImageRef struct {
	Version string `json:"version"`
	// File is the squashfs path relative to the repository; the manifest
	// sits beside it with the .image.json suffix.
	File string `json:"file"`
	// Digest is the digest of the image manifest.
	Digest string `json:"digest"`
	// SHA256 is the digest of the squashfs file itself.
	SHA256 string `json:"sha256"`
}

// OverlayRef locates an overlay in a repository.
type OverlayRef struct {
	Version string `json:"version"`
	File    string `json:"file"`
	// Digest is the digest of the overlay manifest.
	Digest string `json:"digest"`
	// SHA256 is the digest of the overlay archive file.
	SHA256 string `json:"sha256"`
	Parent Ref    `json:"parent"`
}

// Head returns the line's newest element: its last overlay, or the image.
func (l *Line) Head() Ref {
	if n := len(l.Overlays); n > 0 {
		return Ref{Version: l.Overlays[n-1].Version, Digest: l.Overlays[n-1].Digest}
	}
	return Ref{Version: l.Image.Version, Digest: l.Image.Digest}
}

// HasVersion reports whether the line's image or one of its overlays has
// version v.
func (l *Line) HasVersion(v string) bool {
	if l.Image.Version == v {
		return true
	}
	for _, o := range l.Overlays {
		if o.Version == v {
			return true
		}
	}
	return false
}

// Find returns the line named name.
func (x *Index) Find(name string) (*Line, error) {
	for i := range x.Lines {
		if x.Lines[i].Name == name {
			return &x.Lines[i], nil
		}
	}
	return nil, fmt.Errorf("%w: repository has no line %q", ErrInvalid, name)
}

// Validate checks the index: known kind, valid lines, parent links that
// chain from each image and strictly increasing versions.
func (x *Index) Validate() error {
	if x.Schema != Schema || x.Kind != KindIndex {
		return fmt.Errorf("%w: not an index (schema %d, kind %q)", ErrInvalid, x.Schema, x.Kind)
	}
	seen := map[string]bool{}
	for _, l := range x.Lines {
		if err := ValidLine(l.Name); err != nil {
			return err
		}
		if seen[l.Name] {
			return fmt.Errorf("%w: duplicate line %q", ErrInvalid, l.Name)
		}
		seen[l.Name] = true
		if _, err := ParseVersion(l.Image.Version); err != nil {
			return err
		}
		prev := Ref{Version: l.Image.Version, Digest: l.Image.Digest}
		for _, o := range l.Overlays {
			if o.Parent != prev {
				return fmt.Errorf("%w: line %s: overlay %s names parent %s (%s), previous element is %s (%s)",
					ErrInvalid, l.Name, o.Version, o.Parent.Version, o.Parent.Digest, prev.Version, prev.Digest)
			}
			if err := CheckGreater(o.Version, prev.Version); err != nil {
				return fmt.Errorf("line %s: %w", l.Name, err)
			}
			prev = Ref{Version: o.Version, Digest: o.Digest}
		}
	}
	return nil
}
