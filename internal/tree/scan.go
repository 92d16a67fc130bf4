package tree

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

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
//
// The tree is walked on the calling goroutine and file contents are
// hashed by up to scanHashers goroutines meanwhile; the entries, and the
// error returned (the walk's, or else that of the first file in walk
// order that could not be hashed), are what a walk hashing each file in
// turn would give.
func ScanContext(ctx context.Context, root string, skip func(rel string) bool) ([]manifests.Entry, error) {
	// The hashers stop when one fails (cause errHashFailed). A file cut
	// short by that stop would have hashed in a walk taking the files in
	// turn, so its error is never the one reported.
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var out []manifests.Entry
	type job struct {
		i    int
		path string
		size int64
	}
	jobs := make(chan job, 256)
	var hashed []hashResult // by index into out; grown under mu
	var mu sync.Mutex
	var g errgroup.Group
	for range scanHashers() {
		g.Go(func() error {
			buf := make([]byte, 128<<10)
			h := sha256.New()
			for j := range jobs {
				sum, n, err := scanHash(hctx, j.path, h, buf)
				if err == nil && n != j.size {
					err = fmt.Errorf("scanning %s: file changed while read", j.path)
				}
				cut := err != nil && ctx.Err() == nil && errors.Is(context.Cause(hctx), errHashFailed) && errors.Is(err, context.Canceled)
				mu.Lock()
				hashed[j.i] = hashResult{sum: sum, err: err, cut: cut}
				mu.Unlock()
				if err != nil && !cut {
					cancel(errHashFailed) // the walk stops; the error is reported by index below
				}
			}
			return nil
		})
	}
	walkErr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("scanning %s: %w", p, err)
		}
		if err := hctx.Err(); err != nil {
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
		e, err := lstatEntry(p, rel)
		if err != nil {
			return err
		}
		out = append(out, e)
		mu.Lock()
		hashed = append(hashed, hashResult{})
		mu.Unlock()
		if e.Type == manifests.TypeFile {
			select {
			case jobs <- job{i: len(out) - 1, path: p, size: e.Size}:
			case <-hctx.Done():
				return hctx.Err()
			}
		}
		return nil
	})
	close(jobs)
	_ = g.Wait()
	for i, r := range hashed {
		if r.cut {
			continue // a later file failed while this one was read
		}
		if r.err != nil {
			// A file that failed comes before whatever the walk met
			// after it (the walk stopped because of it).
			return nil, r.err
		}
		out[i].SHA256 = r.sum
	}
	if walkErr != nil {
		return nil, walkErr
	}
	slices.SortFunc(out, func(a, b manifests.Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// errHashFailed is the cause with which ScanContext stops its hashers
// when one of them failed.
var errHashFailed = errors.New("another file could not be hashed")

type hashResult struct {
	sum string
	err error
	cut bool // err is the stop after another file failed
}

// scanHashers is how many files ScanContext hashes at once: one per CPU,
// at most four (beyond that the disk, not SHA-256, sets the pace).
var scanHashers = func() int { return min(runtime.GOMAXPROCS(0), 4) }

// scanHash hashes one file for ScanContext (hashInto; a test replaces it
// to fail one file while others are read).
var scanHash = hashInto

// hashInto hashes the file at p with h, reading through buf, and returns
// the hex SHA-256 and length; it stops once ctx is done.
func hashInto(ctx context.Context, p string, h hash.Hash, buf []byte) (string, int64, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", p, &os.PathError{Op: "open", Path: p, Err: err})
	}
	defer unix.Close(fd)
	h.Reset()
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, fmt.Errorf("hashing %s: %w", p, err)
		}
		m, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("hashing %s: %w", p, &os.PathError{Op: "read", Path: p, Err: err})
		}
		if m == 0 {
			return hex.EncodeToString(h.Sum(nil)), n, nil
		}
		h.Write(buf[:m])
		n += int64(m)
	}
}

// StatEntry describes the file at host path p as the entry rel, hashing
// its content if it is a regular file. It does not follow symlinks.
func StatEntry(p, rel string) (manifests.Entry, error) {
	return statEntry(context.Background(), p, rel)
}

func statEntry(ctx context.Context, p, rel string) (manifests.Entry, error) {
	e, err := lstatEntry(p, rel)
	if err != nil || e.Type != manifests.TypeFile {
		return e, err
	}
	sum, n, err := HashFileContext(ctx, p)
	if err != nil {
		return e, err
	}
	if n != e.Size {
		return e, fmt.Errorf("scanning %s: file changed while read", p)
	}
	e.SHA256 = sum
	return e, nil
}

// lstatEntry describes the file at host path p as the entry rel, all but
// a regular file's SHA-256. It does not follow symlinks.
func lstatEntry(p, rel string) (manifests.Entry, error) {
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
	n, err := ctxio.Copy(h, ctxio.NewReader(ctx, f))
	if err != nil {
		return "", 0, fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
