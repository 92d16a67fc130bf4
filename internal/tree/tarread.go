package tree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/strata-dev/strata/manifests"
)

// Limits bound what a Reader accepts, against decompression bombs and
// resource exhaustion.
type Limits struct {
	// MaxFileSize bounds one member's content (default 4 GiB).
	MaxFileSize int64
	// MaxTotalSize bounds all content together (default 16 GiB).
	MaxTotalSize int64
	// MaxEntries bounds the number of members (default 1,000,000).
	MaxEntries int
}

// DefaultLimits are the limits used when a field of Limits is zero.
var DefaultLimits = Limits{MaxFileSize: 4 << 30, MaxTotalSize: 16 << 30, MaxEntries: 1_000_000}

// Reader reads a tar stream as tree entries, refusing anything a strata
// tree may not hold: unsafe or absolute paths, duplicates, device nodes,
// FIFOs, hard links, symlinks that climb out of the root, and streams over
// their limits.
type Reader struct {
	tr     *tar.Reader
	limits Limits
	seen   map[string]bool
	total  int64
	count  int
}

// NewReader returns a Reader over the uncompressed tar stream r.
func NewReader(r io.Reader, limits Limits) *Reader {
	return NewTarReader(tar.NewReader(r), limits)
}

// NewTarReader returns a Reader over tr, from its current position.
func NewTarReader(tr *tar.Reader, limits Limits) *Reader {
	if limits.MaxFileSize == 0 {
		limits.MaxFileSize = DefaultLimits.MaxFileSize
	}
	if limits.MaxTotalSize == 0 {
		limits.MaxTotalSize = DefaultLimits.MaxTotalSize
	}
	if limits.MaxEntries == 0 {
		limits.MaxEntries = DefaultLimits.MaxEntries
	}
	return &Reader{tr: tr, limits: limits, seen: map[string]bool{}}
}

// Next returns the next member as an entry (SHA256 left empty) and a reader
// of its content, valid until the next call. The root directory member
// ("./") is skipped. It returns io.EOF at the end of the archive.
func (r *Reader) Next() (manifests.Entry, io.Reader, error) {
	for {
		h, err := r.tr.Next()
		if err == io.EOF {
			return manifests.Entry{}, nil, io.EOF
		}
		if err != nil {
			return manifests.Entry{}, nil, fmt.Errorf("reading tar: %w", unexpected(err))
		}
		r.count++
		if r.count > r.limits.MaxEntries {
			return manifests.Entry{}, nil, fmt.Errorf("%w: more than %d entries", ErrLimit, r.limits.MaxEntries)
		}
		name := h.Name
		if strings.HasPrefix(name, "/") {
			return manifests.Entry{}, nil, fmt.Errorf("member %q: absolute path: %w", name, manifests.ErrUnsafePath)
		}
		name = strings.TrimPrefix(name, "./")
		name = strings.TrimSuffix(name, "/")
		if name == "" || name == "." {
			continue
		}
		e, err := r.entry(h, name)
		if err != nil {
			return e, nil, err
		}
		if r.seen[e.Path] {
			return e, nil, fmt.Errorf("member %s: %w", e.Path, ErrDuplicate)
		}
		r.seen[e.Path] = true
		return e, io.LimitReader(r.tr, e.Size), nil
	}
}

func (r *Reader) entry(h *tar.Header, name string) (manifests.Entry, error) {
	if err := manifests.ValidPath(name); err != nil {
		return manifests.Entry{}, fmt.Errorf("member %q: %w", h.Name, err)
	}
	e := manifests.Entry{Path: name, Mode: manifests.Mode(h.Mode & 07777), UID: h.Uid, GID: h.Gid}
	switch h.Typeflag {
	case tar.TypeDir:
		e.Type = manifests.TypeDir
	case tar.TypeReg:
		e.Type = manifests.TypeFile
		if h.Size < 0 || h.Size > r.limits.MaxFileSize {
			return e, fmt.Errorf("member %s: %d bytes over the %d-byte file limit: %w", name, h.Size, r.limits.MaxFileSize, ErrLimit)
		}
		r.total += h.Size
		if r.total > r.limits.MaxTotalSize {
			return e, fmt.Errorf("member %s: archive content over the %d-byte limit: %w", name, r.limits.MaxTotalSize, ErrLimit)
		}
		e.Size = h.Size
	case tar.TypeSymlink:
		e.Type = manifests.TypeSymlink
		e.Mode = 0777
		e.Target = h.Linkname
		if err := manifests.CheckLinkTarget(name, h.Linkname); err != nil {
			return e, fmt.Errorf("member %s: %w", name, err)
		}
	case tar.TypeLink:
		target := strings.TrimPrefix(h.Linkname, "./")
		if strings.HasPrefix(target, "/") || manifests.ValidPath(target) != nil {
			return e, fmt.Errorf("member %s: hard link to %q points outside the root: %w", name, h.Linkname, manifests.ErrUnsafePath)
		}
		return e, fmt.Errorf("member %s: hard link to %s: %w", name, target, ErrHardlink)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return e, fmt.Errorf("member %s: %w", name, ErrSpecialFile)
	default:
		return e, fmt.Errorf("member %s: unsupported tar type %q: %w", name, h.Typeflag, ErrSpecialFile)
	}
	return e, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("archive truncated: %w", err)
	}
	return err
}
