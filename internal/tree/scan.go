package tree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/manifests"
)

// Scan walks the directory root and returns an entry for every path below
// it, sorted, with file contents hashed. Paths for which skip returns true
// are left out with everything below them (skip may be nil). Device nodes,
// FIFOs and sockets are ErrSpecialFile; hard links are scanned as the
// regular files they are.
func Scan(root string, skip func(rel string) bool) ([]manifests.Entry, error) {
	return ScanContext(context.Background(), root, skip)
}

// ScanContext is Scan that stops with ctx's error once ctx is done (a
// node's tree of gigabytes takes a while to hash).
func ScanContext(ctx context.Context, root string, skip func(rel string) bool) ([]manifests.Entry, error) {
	var out []manifests.Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("scanning %s: %w", p, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("scanning %s: %w", p, err)
		}
		rel = filepath.ToSlash(rel)
		if skip != nil && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		e, err := statEntry(ctx, p, rel)
		if err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// StatEntry describes the file at host path p as the entry rel, hashing
// its content if it is a regular file. It does not follow symlinks.
func StatEntry(p, rel string) (manifests.Entry, error) {
	return statEntry(context.Background(), p, rel)
}

func statEntry(ctx context.Context, p, rel string) (manifests.Entry, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return manifests.Entry{}, fmt.Errorf("scanning %s: %w", p, err)
	}
	e := manifests.Entry{Path: rel, Mode: ModeOf(fi.Mode())}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = int(st.Uid), int(st.Gid)
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = manifests.TypeFile
		e.Size = fi.Size()
		sum, n, err := HashFileContext(ctx, p)
		if err != nil {
			return e, err
		}
		if n != e.Size {
			return e, fmt.Errorf("scanning %s: file changed while read", p)
		}
		e.SHA256 = sum
	case fi.IsDir():
		e.Type = manifests.TypeDir
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = manifests.TypeSymlink
		e.Mode = 0777
		if e.Target, err = os.Readlink(p); err != nil {
			return e, fmt.Errorf("scanning %s: %w", p, err)
		}
	default:
		return e, fmt.Errorf("scanning %s: %w", p, ErrSpecialFile)
	}
	return e, nil
}

// HashFile returns the hex SHA-256 of the file at p and its length.
func HashFile(p string) (string, int64, error) {
	return HashFileContext(context.Background(), p)
}

// HashFileContext is HashFile that stops with ctx's error once ctx is
// done (an image of gigabytes takes seconds to hash).
func HashFileContext(ctx context.Context, p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxio.NewReader(ctx, f))
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
