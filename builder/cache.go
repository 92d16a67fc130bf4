package builder

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// ErrCache reports a cache entry that changed after it was made, or a
// cache directory others could write to (of the manifests.ErrRejected
// class).
var ErrCache = manifests.Rejection("cache entry changed since it was made")

// cacheMeta is written beside a cache entry, as <key>.json.
type cacheMeta struct {
	// Inputs are what the key was computed from, for people reading the
	// cache.
	Inputs any `json:"inputs"`
	// TreeDigest is the digest of the entry's tree (rootfs rules), checked
	// whenever the entry is reused.
	TreeDigest string `json:"tree_digest"`
}

// cacheKey returns the hex SHA-256 of the JSON encoding of inputs.
func cacheKey(inputs any) (string, error) {
	b, err := json.Marshal(inputs)
	if err != nil {
		return "", fmt.Errorf("computing cache key: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// cached returns the root tree cached as kind/key below the cache
// directory, with its entries, making it first when it is missing: build
// fills an empty temporary directory, which is scanned and renamed into
// place only when make succeeds, so an entry is either whole or absent.
// A lock file serialises builds of one key. A reused entry must still
// have the tree digest recorded when it was made.
func cached(ctx context.Context, s *settings, kind, key string, inputs any, build func(tmp string) error) (string, []manifests.Entry, error) {
	base := filepath.Join(s.cache(), kind)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", nil, fmt.Errorf("cache: %w", err)
	}
	for _, d := range []string{s.cache(), base} {
		if err := checkPrivate(d); err != nil {
			return "", nil, err
		}
	}
	unlock, err := safefile.Lock(ctx, filepath.Join(base, key+".lock"), 6*time.Hour)
	if err != nil {
		return "", nil, fmt.Errorf("cache %s: %w", base, err)
	}
	defer unlock()
	final := filepath.Join(base, key)
	metaPath := final + ".json"
	if raw, err := os.ReadFile(metaPath); err == nil {
		if fi, err := os.Stat(final); err == nil && fi.IsDir() {
			var m cacheMeta
			if err := json.Unmarshal(raw, &m); err != nil {
				return "", nil, fmt.Errorf("cache entry %s: %w: %v", metaPath, ErrCache, err)
			}
			s.progress(fmt.Sprintf("using cached %s %s", kind, final))
			entries, err := scanRootfs(final)
			if err != nil {
				return "", nil, err
			}
			if d := manifests.TreeDigest(entries); d != m.TreeDigest {
				return "", nil, fmt.Errorf("cache entry %s: tree digest %s, recorded %s: %w (remove it to rebuild)", final, d, m.TreeDigest, ErrCache)
			}
			return final, entries, nil
		}
	}
	// A directory without its record was left by a crash between the
	// rename and the record, or by hand: rebuild it. The old record goes
	// first, so a crash from here on never pairs it with a new tree; so do
	// temporary trees of builds killed before they finished.
	if err := os.Remove(metaPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("cache entry %s: %w", metaPath, err)
	}
	if err := removeTree(final); err != nil {
		return "", nil, err
	}
	stale, _ := filepath.Glob(filepath.Join(base, "."+key+".tmp-*"))
	for _, st := range stale {
		if err := removeTree(st); err != nil {
			return "", nil, err
		}
	}
	tmp, err := os.MkdirTemp(base, "."+key+".tmp-")
	if err != nil {
		return "", nil, fmt.Errorf("cache: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = removeTree(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", nil, fmt.Errorf("cache: %w", err)
	}
	if err := build(tmp); err != nil {
		return "", nil, err
	}
	entries, err := scanRootfs(tmp)
	if err != nil {
		return "", nil, fmt.Errorf("cache entry %s: %w", final, err)
	}
	// What a run step left must be a valid tree before it is kept:
	// otherwise every later build would fail on the cached entry.
	for _, e := range entries {
		if err := e.Validate(); err != nil {
			return "", nil, fmt.Errorf("cache entry %s: the tree built is not valid: %w", final, err)
		}
	}
	if err := safefile.SyncFS(tmp); err != nil {
		return "", nil, err
	}
	raw, err := json.MarshalIndent(cacheMeta{Inputs: inputs, TreeDigest: manifests.TreeDigest(entries)}, "", "  ")
	if err != nil {
		return "", nil, fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", nil, fmt.Errorf("cache: %w", err)
	}
	ok = true
	// The record commits the entry: written last, atomically.
	if err := safefile.WriteAtomic(metaPath, append(raw, '\n'), 0o644); err != nil {
		return "", nil, fmt.Errorf("cache entry %s: %w", final, err)
	}
	return final, entries, nil
}

// checkPrivate refuses a cache directory that someone else could plant
// entries in: it must be a real directory owned by the user building, and
// writable by nobody else. Cached trees go into images as they are.
func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("cache %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("cache %s: %w: it must be a directory owned by uid %d and writable by it alone (mode %s)", dir, ErrCache, os.Geteuid(), fi.Mode())
	}
	return nil
}

// removeTree removes dir and everything below it, refusing when anything
// is mounted below it (which run steps and debootstrap never leave behind,
// since their mounts live in a private mount namespace; this guards the
// host's /dev and /sys should that ever fail).
func removeTree(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && manifests.Within(strings.TrimPrefix(fields[4], "/"), strings.TrimPrefix(abs, "/")) {
			return fmt.Errorf("removing %s: %s is still mounted; unmount it first", dir, fields[4])
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
