package manifests

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// EntryType is the kind of a tree entry.
type EntryType string

// The entry types a tree may hold. Devices, FIFOs and sockets are never
// part of a strata tree.
const (
	TypeDir     EntryType = "dir"
	TypeFile    EntryType = "file"
	TypeSymlink EntryType = "symlink"
)

// Mode holds permission bits including setuid, setgid and sticky (07777).
// It encodes in JSON as an octal string such as "0755".
type Mode uint32

// MarshalText encodes m as four octal digits.
func (m Mode) MarshalText() ([]byte, error) {
	return []byte(fmt.Sprintf("%04o", uint32(m))), nil
}

// UnmarshalText decodes an octal mode string.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 8, 32)
	if err != nil || v > 07777 {
		return fmt.Errorf("%w: mode %q is not an octal permission value", ErrInvalid, b)
	}
	*m = Mode(v)
	return nil
}

// Entry is one node of a file tree: its path, type, ownership, permission
// bits and, for files, size and content hash; for symlinks, the target.
type Entry struct {
	Path   string    `json:"path"`
	Type   EntryType `json:"type"`
	Mode   Mode      `json:"mode"`
	UID    int       `json:"uid"`
	GID    int       `json:"gid"`
	Size   int64     `json:"size,omitempty"`
	SHA256 string    `json:"sha256,omitempty"`
	Target string    `json:"target,omitempty"`
}

// Validate checks that e is well formed: a safe path, a known type, and the
// fields its type needs.
func (e Entry) Validate() error {
	if err := ValidPath(e.Path); err != nil {
		return err
	}
	if e.Mode > 07777 {
		return fmt.Errorf("%w: %s: mode %o out of range", ErrInvalid, e.Path, uint32(e.Mode))
	}
	if e.UID < 0 || e.GID < 0 {
		return fmt.Errorf("%w: %s: negative owner", ErrInvalid, e.Path)
	}
	switch e.Type {
	case TypeDir:
		if e.Size != 0 || e.SHA256 != "" || e.Target != "" {
			return fmt.Errorf("%w: %s: directory with size, hash or target", ErrInvalid, e.Path)
		}
	case TypeFile:
		if e.Size < 0 {
			return fmt.Errorf("%w: %s: negative size %d", ErrInvalid, e.Path, e.Size)
		}
		if !validHex(e.SHA256, 64) || e.Target != "" {
			return fmt.Errorf("%w: %s: file needs a size and a sha256", ErrInvalid, e.Path)
		}
	case TypeSymlink:
		if e.Size != 0 || e.SHA256 != "" {
			return fmt.Errorf("%w: %s: symlink with size or hash", ErrInvalid, e.Path)
		}
		return CheckLinkTarget(e.Path, e.Target)
	default:
		return fmt.Errorf("%w: %s: unsupported entry type %q", ErrInvalid, e.Path, e.Type)
	}
	return nil
}

// ValidPath reports whether p is a clean relative slash-separated path
// inside a tree: not empty, not absolute, no "." or ".." elements, no empty
// elements, no NUL or other control character (C0, DEL, C1: a newline
// would forge lines in listings, an escape drive the terminal showing
// them) and no trailing slash.
func ValidPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || strings.HasSuffix(p, "/") {
		return fmt.Errorf("%w: %q", ErrUnsafePath, p)
	}
	if hasControl(p) {
		return fmt.Errorf("%w: %q has a control character (a newline, an escape, ...), which no listing could show as it is", ErrUnsafePath, p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("%w: %q", ErrUnsafePath, p)
		}
	}
	return nil
}

// Parent returns the parent directory of path p, or "" for a top-level
// path.
func Parent(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// Within reports whether p equals dir or lies below it. The empty dir
// contains every path.
func Within(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

func validHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CheckLinkTarget reports whether a symlink at path p with the given target
// stays inside the tree. Absolute targets are resolved against the tree's
// own root on the node, so they stay inside; relative targets must not climb
// above the root.
func CheckLinkTarget(p, target string) error {
	if target == "" || strings.ContainsRune(target, 0) {
		return fmt.Errorf("%w: symlink %s has an empty or NUL target", ErrUnsafePath, p)
	}
	if hasControl(target) {
		return fmt.Errorf("%w: symlink %s has a target with a control character: %q", ErrUnsafePath, p, target)
	}
	if strings.HasPrefix(target, "/") {
		return nil
	}
	depth := strings.Count(p, "/") // directories between the root and the link
	for _, el := range strings.Split(target, "/") {
		switch el {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return fmt.Errorf("%w: symlink %s -> %s points outside the root", ErrUnsafePath, p, target)
			}
		default:
			depth++
		}
	}
	return nil
}

// ImagePath turns an absolute image path as operators write it ("/etc/x")
// into the tree-relative form ("etc/x"), refusing relative and unsafe
// paths.
func ImagePath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q must be an absolute image path", ErrUnsafePath, p)
	}
	rel := strings.TrimPrefix(p, "/")
	if err := ValidPath(rel); err != nil {
		return "", err
	}
	return rel, nil
}

// EntryDiff is one field in which two entries of one path differ, with
// the field's values in each, as messages show them.
type EntryDiff struct {
	// Field is "type", "content", "mode", "owner" or "target".
	Field    string
	Old, New string
}

// EntryDiffs lists the fields in which o and n, two entries of one path,
// differ, in that order: type, content (digest or size; no values),
// mode, owner, target. The one comparison every audit and change report
// makes.
func EntryDiffs(o, n Entry) []EntryDiff {
	var out []EntryDiff
	if o.Type != n.Type {
		out = append(out, EntryDiff{"type", string(o.Type), string(n.Type)})
	}
	if o.SHA256 != n.SHA256 || o.Size != n.Size {
		out = append(out, EntryDiff{Field: "content"})
	}
	if o.Mode != n.Mode {
		out = append(out, EntryDiff{"mode", fmt.Sprintf("%04o", uint32(o.Mode)), fmt.Sprintf("%04o", uint32(n.Mode))})
	}
	if o.UID != n.UID || o.GID != n.GID {
		out = append(out, EntryDiff{"owner", fmt.Sprintf("%d:%d", o.UID, o.GID), fmt.Sprintf("%d:%d", n.UID, n.GID)})
	}
	if o.Target != n.Target {
		out = append(out, EntryDiff{"target", o.Target, n.Target})
	}
	return out
}

// EntryChanges names what differs between o and n, two entries of one
// path: "type file -> symlink" alone, else any of "content",
// "mode 0644 -> 0600", "owner 0:0 -> 1000:1000", "target a -> b".
func EntryChanges(o, n Entry) []string {
	var out []string
	for _, d := range EntryDiffs(o, n) {
		switch {
		case d.Field == "type":
			return []string{"type " + d.Old + " -> " + d.New}
		case d.Field == "content":
			out = append(out, "content")
		default:
			out = append(out, d.Field+" "+d.Old+" -> "+d.New)
		}
	}
	return out
}

// hasControl reports whether s holds a control character (see IsControl).
func hasControl(s string) bool {
	return strings.ContainsFunc(s, IsControl)
}

// IsControl reports whether r is a control character, C0 (below U+0020),
// DEL or C1 (U+0080 to U+009F), or a Unicode format character
// (bidirectional overrides, zero-width spaces): shown, it would drive the
// terminal or make what is shown differ from what it is.
func IsControl(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Cf, r)
}

// printable refuses, naming what, strings that listings print which are
// longer than 4096 bytes or hold control characters.
func printable(what string, ss []string) error {
	for _, s := range ss {
		if len(s) > 4096 || hasControl(s) {
			return fmt.Errorf("%w: %s %q: too long or holds a control character", ErrInvalid, what, clip(s))
		}
	}
	return nil
}
