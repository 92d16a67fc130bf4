package manifests

import (
	"fmt"
	"strings"
)

// Schema is the version of every strata document this package writes.
const Schema = 1

// Node-side paths, relative to a tree's root.
const (
	// ImageManifestPath is where an image carries its own manifest.
	ImageManifestPath = "usr/lib/strata/image.json"
	// KeysDir holds the public keys a node trusts (minisign .pub files).
	KeysDir = "usr/lib/strata/keys"
	// StateDir is the node's own state: ledger, lock, journal, undo data.
	StateDir = "var/lib/strata"
	// LedgerPath is the node's ledger.
	LedgerPath = StateDir + "/ledger.json"
	// IdentityKeyPath is the node's identity key (a minisign key, 0600):
	// its agent signs its health with it.
	IdentityKeyPath = StateDir + "/identity.key"
	// ImageSigPath keeps the signature of the image manifest the node was
	// provisioned from.
	ImageSigPath = StateDir + "/image.json.minisig"
)

// IsNodeState reports whether p is strata's own bookkeeping rather than
// part of the managed tree: the image manifest copy and the node state
// directory. Such paths are left out of tree digests, and overlays may not
// touch them.
func IsNodeState(p string) bool {
	return p == ImageManifestPath || Within(p, StateDir)
}

// protectedDirs are the directories that hold strata's own paths (the
// state directory, the keys, the image manifest copy). Trees must keep
// them as real directories: a symlink there would move node state or
// trust anchors elsewhere, and deleting them would orphan the node.
var protectedDirs = map[string]bool{
	"var": true, "var/lib": true, "usr": true, "usr/lib": true,
	"usr/lib/strata": true, KeysDir: true,
}

// IsProtected reports whether p is one of the directories that hold
// strata's own paths; a tree may only have a directory there.
func IsProtected(p string) bool { return protectedDirs[p] }

// HoldsStrata reports whether removing p would remove strata's own files:
// p is node state, one of the protected directories, or an ancestor of the
// image manifest copy or the state directory.
func HoldsStrata(p string) bool {
	return IsNodeState(p) || IsProtected(p) || Within(ImageManifestPath, p) || Within(StateDir, p)
}

// Ref names a manifest by version and digest.
type Ref struct {
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

// ImageManifest describes a root image: its line and version, the digest
// of its tree, the keys it trusts, its service catalog and every file.
type ImageManifest struct {
	Schema  int    `json:"schema"`
	Kind    string `json:"kind"`
	Line    string `json:"line"`
	Version string `json:"version"`
	// Created is the image's fixed timestamp (RFC 3339), taken from the
	// recipe's epoch so that builds are reproducible.
	Created string `json:"created"`
	// Recipe is the digest of the recipe the image was built from.
	Recipe string `json:"recipe,omitempty"`
	// Base is set on regenerated images: the line's original image.
	Base *Ref `json:"base,omitempty"`
	// Head is set on regenerated images: the last overlay folded in.
	Head *Ref `json:"head,omitempty"`
	// Compressor is the squashfs compressor used.
	Compressor string `json:"compressor"`
	// TreeDigest covers every entry of Files.
	TreeDigest string `json:"tree_digest"`
	// Keys are the minisign public keys the image trusts, in their
	// one-line base64 form; the same keys are files under KeysDir.
	Keys []string `json:"keys"`
	// Hierarchies are the managed hierarchies: the top-level directories
	// (tree paths) overlays of the line may change, which a node that
	// boots the image stacks. Empty means DefaultHierarchies.
	Hierarchies []string `json:"hierarchies,omitempty"`
	// Data are directories (tree paths) where the node's services keep
	// their own data, beside DataDirs (/var): no audit or repair judges
	// what is below them. Outside the managed hierarchies.
	Data    []string `json:"data,omitempty"`
	Catalog Catalog  `json:"catalog"`
	Files   []Entry  `json:"files"`
}

// KindImage, KindOverlay, KindIndex and KindLedger tag documents.
const (
	KindImage   = "image"
	KindOverlay = "overlay"
	KindIndex   = "index"
	KindLedger  = "ledger"
)

// Validate checks the manifest's schema, version, digests and entries.
func (m *ImageManifest) Validate() error {
	if m.Schema != Schema || m.Kind != KindImage {
		return fmt.Errorf("%w: not an image manifest (schema %d, kind %q)", ErrInvalid, m.Schema, m.Kind)
	}
	if err := ValidLine(m.Line); err != nil {
		return err
	}
	if _, err := ParseVersion(m.Version); err != nil {
		return err
	}
	if !ValidDigest(m.TreeDigest) {
		return fmt.Errorf("%w: image tree_digest %q", ErrInvalid, m.TreeDigest)
	}
	if (m.Base == nil) != (m.Head == nil) {
		return fmt.Errorf("%w: image base and head must be set together", ErrInvalid)
	}
	if err := validEntries(m.Files); err != nil {
		return err
	}
	if err := m.Catalog.Validate(); err != nil {
		return err
	}
	if err := ValidHierarchies(m.Hierarchies); err != nil {
		return err
	}
	if err := ValidData(m.Data, m.Hierarchies); err != nil {
		return err
	}
	// A whole tree: every parent is a directory of the tree, so nothing
	// can be placed through a symlink.
	types := make(map[string]EntryType, len(m.Files))
	for _, e := range m.Files {
		types[e.Path] = e.Type
	}
	for _, e := range m.Files {
		if p := Parent(e.Path); p != "" && types[p] != TypeDir {
			return fmt.Errorf("%w: image entry %s: parent %s is not a directory of the image", ErrInvalid, e.Path, p)
		}
		if IsProtected(e.Path) && e.Type != TypeDir {
			return fmt.Errorf("%w: image entry /%s is a %s; strata needs a directory there", ErrUnsafePath, e.Path, e.Type)
		}
		if Within(e.Path, KeysDir) && e.Path != KeysDir && e.Type != TypeFile {
			return fmt.Errorf("%w: image entry /%s is a %s; a trusted key is a regular file", ErrUnsafePath, e.Path, e.Type)
		}
	}
	if err := checkKeyFiles(m.Keys, m.Files); err != nil {
		return err
	}
	if got := TreeDigest(m.Files); got != m.TreeDigest {
		return fmt.Errorf("%w: image files digest to %s, manifest says %s", ErrInvalid, got, m.TreeDigest)
	}
	return nil
}

// ValidLine checks a line name: 1-64 characters of [a-z0-9._-], starting
// with a letter or digit.
func ValidLine(s string) error {
	if len(s) == 0 || len(s) > 64 {
		return fmt.Errorf("%w: line name %q must be 1-64 characters", ErrInvalid, s)
	}
	for i, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%w: line name %q: only a-z, 0-9, '.', '_' and '-' allowed", ErrInvalid, s)
		}
	}
	return nil
}

func validEntries(es []Entry) error {
	seen := make(map[string]bool, len(es))
	for i, e := range es {
		if err := e.Validate(); err != nil {
			return err
		}
		if IsNodeState(e.Path) {
			return fmt.Errorf("%w: %s is strata node state", ErrUnsafePath, e.Path)
		}
		if seen[e.Path] {
			return fmt.Errorf("%w: duplicate entry %s", ErrInvalid, e.Path)
		}
		if i > 0 && es[i-1].Path >= e.Path {
			return fmt.Errorf("%w: entries not sorted at %s", ErrInvalid, e.Path)
		}
		seen[e.Path] = true
	}
	return nil
}

// DataDirs are where a node keeps its own data (what its services write
// under /var: logs, databases, caches): never part of what an audit or a
// repair compares, on any node, whether or not the image ships files
// there.
var DataDirs = []string{"var"}

// IsData reports whether tree path p is a node's own data (in DataDirs).
func IsData(p string) bool {
	for _, d := range DataDirs {
		if Within(p, d) {
			return true
		}
	}
	return false
}

// IsData reports whether tree path p is the node's own data: in DataDirs
// or in one of the image's declared data directories.
func (m *ImageManifest) IsData(p string) bool {
	if IsData(p) {
		return true
	}
	for _, d := range m.Data {
		if Within(p, d) {
			return true
		}
	}
	return false
}

// maxData bounds an image's declared data directories.
const maxData = 64

// ValidData checks an image's declared data directories: tree paths,
// sorted, each once, none below another, at most 64, none of them or
// above them a managed hierarchy (hierarchies; empty: the defaults),
// strata's state or a runtime file system: a data directory there would
// hide changes to what strata manages.
func ValidData(data, hierarchies []string) error {
	if len(data) > maxData {
		return fmt.Errorf("%w: %d data directories, at most %d", ErrInvalid, len(data), maxData)
	}
	if len(hierarchies) == 0 {
		hierarchies = DefaultHierarchies
	}
	for i, d := range data {
		if err := ValidPath(d); err != nil {
			return fmt.Errorf("%w: data directory %q: %v", ErrInvalid, clip(d), err)
		}
		if i > 0 && data[i-1] >= d {
			return fmt.Errorf("%w: data directories not sorted or listed twice at /%s", ErrInvalid, d)
		}
		if i > 0 && Within(d, data[i-1]) {
			return fmt.Errorf("%w: data directory /%s is below /%s", ErrInvalid, d, data[i-1])
		}
		top, _, _ := strings.Cut(d, "/")
		for _, h := range hierarchies {
			if top == h {
				return fmt.Errorf("%w: data directory /%s is in the managed hierarchy /%s (what strata manages is never data)", ErrInvalid, d, h)
			}
		}
		switch top {
		case "run", "proc", "sys", "dev", "tmp", "state", "boot":
			return fmt.Errorf("%w: data directory /%s is in /%s (node state or a runtime file system)", ErrInvalid, d, top)
		case "bin", "sbin", "lib", "lib32", "lib64", "libx32":
			return fmt.Errorf("%w: data directory /%s is in /%s (programs and libraries are never data)", ErrInvalid, d, top)
		}
	}
	return nil
}

// DefaultHierarchies are the managed hierarchies of an image that names
// none.
var DefaultHierarchies = []string{"etc", "usr", "opt"}

// Managed returns the image's managed hierarchies.
func (m *ImageManifest) Managed() []string {
	if len(m.Hierarchies) == 0 {
		return DefaultHierarchies
	}
	return m.Hierarchies
}

// ValidHierarchies checks a list of managed hierarchies: each a single
// top-level directory name, not strata's state or a runtime file system,
// each once, at most 16.
func ValidHierarchies(hs []string) error {
	if len(hs) > 16 {
		return fmt.Errorf("%w: %d managed hierarchies, at most 16", ErrInvalid, len(hs))
	}
	seen := map[string]bool{}
	for _, h := range hs {
		if err := ValidPath(h); err != nil || strings.Contains(h, "/") {
			return fmt.Errorf("%w: managed hierarchy %q must be one top-level directory", ErrInvalid, h)
		}
		switch h {
		case "var", "run", "proc", "sys", "dev", "tmp", "state", "boot":
			return fmt.Errorf("%w: /%s cannot be a managed hierarchy (node state or a runtime file system)", ErrInvalid, h)
		}
		if seen[h] {
			return fmt.Errorf("%w: managed hierarchy /%s listed twice", ErrInvalid, h)
		}
		seen[h] = true
	}
	return nil
}

// InHierarchies reports whether tree path p lies inside one of hs.
func InHierarchies(hs []string, p string) bool {
	for _, h := range hs {
		if Within(p, h) {
			return true
		}
	}
	return false
}
