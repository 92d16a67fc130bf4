package configset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
)

// maxFile bounds how much of one configuration file is hashed.
const maxFile = 64 << 20

// maxDepth bounds how deep a claimed directory is walked.
const maxDepth = 32

// entry is one path read from disk.
type entry struct {
	value   string // "" for a directory
	changed time.Time
}

// reader reads paths below one root, each once.
type reader struct {
	root  string
	rfd   int
	memo  map[string][]pathEntry
	count int
}

type pathEntry struct {
	path string
	entry
}

func newReader(root string) (*reader, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	return &reader{root: root, rfd: fd, memo: map[string][]pathEntry{}}, nil
}

func (r *reader) close() { unix.Close(r.rfd) }

// read adds what the claimed path p holds on disk to d.
func (r *reader) read(p string, d OnDisk) error {
	got, ok := r.memo[p]
	if !ok {
		var err error
		if got, err = r.walk(p); err != nil {
			return err
		}
		r.memo[p] = got
	}
	for _, e := range got {
		if e.value != "" {
			d.Set[e.path] = e.value
		}
		d.Changed[e.path] = e.changed
	}
	return nil
}

// walk reads the claimed path p: nothing when it (or a directory on the
// way) does not exist or is reached only through a link.
func (r *reader) walk(p string) ([]pathEntry, error) {
	pfd, err := safefile.OpenDirBeneath(r.rfd, parent(p))
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return nil, nil
		}
		return nil, &os.PathError{Op: "openat2", Path: r.root + "/" + parent(p), Err: err}
	}
	defer unix.Close(pfd)
	var out []pathEntry
	// An absent claimed path has no change time of its own; its
	// directory's would also move for every sibling, so it is not taken
	// (a deleted file still shows as drift from the head).
	err = r.visit(pfd, path.Base(p), p, 0, &out)
	return out, err
}

// visit reads name in the directory open as dfd, at tree path p.
func (r *reader) visit(dfd int, name, p string, depth int, out *[]pathEntry) error {
	r.count++
	if r.count > 4*1024*1024 || len(*out) > manifests.MaxConfigSet {
		return fmt.Errorf("reading %s/%s: %w (over %d)", r.root, p, ErrTooMany, manifests.MaxConfigSet)
	}
	if !utf8.ValidString(p) || manifests.ValidPath(p) != nil {
		// Such a name cannot be recorded or shown as it is.
		return fmt.Errorf("reading %s: %q is not a name strata records (not UTF-8, or a control character)", r.root, p)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "stat", Path: r.root + "/" + p, Err: err}
	}
	e := entry{changed: time.Unix(st.Ctim.Unix())}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Size > maxFile {
			return fmt.Errorf("reading %s/%s: larger than %d bytes", r.root, p, maxFile)
		}
		sum, err := hashAt(dfd, name, r.root+"/"+p, &st)
		if err != nil {
			return err
		}
		e.value = sum
	case unix.S_IFLNK:
		buf := make([]byte, 4097)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return &os.PathError{Op: "readlink", Path: r.root + "/" + p, Err: err}
		}
		e.value = "link:" + string(buf[:min(n, 4096)])
	case unix.S_IFDIR:
		*out = append(*out, pathEntry{p, e})
		if depth >= maxDepth {
			return fmt.Errorf("reading %s/%s: directories deeper than %d", r.root, p, maxDepth)
		}
		return r.dir(dfd, name, p, depth, out)
	default:
		e.value = "type:" + safefile.TypeName(fileType(st.Mode))
	}
	*out = append(*out, pathEntry{p, e})
	return nil
}

// dir reads the directory name in dfd, at tree path p, and everything
// below it.
func (r *reader) dir(dfd int, name, p string, depth int, out *[]pathEntry) error {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: r.root + "/" + p, Err: err}
	}
	f := os.NewFile(uintptr(fd), r.root+"/"+p)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("listing %s: %w", f.Name(), err)
	}
	for _, n := range names {
		if err := r.visit(fd, n, p+"/"+n, depth+1, out); err != nil {
			return err
		}
	}
	return nil
}

// fileType maps a stat mode's type bits to an os.FileMode type.
func fileType(m uint32) os.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFLNK:
		return os.ModeSymlink
	case unix.S_IFDIR:
		return os.ModeDir
	case unix.S_IFIFO:
		return os.ModeNamedPipe
	case unix.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		return os.ModeDevice
	case unix.S_IFSOCK:
		return os.ModeSocket
	}
	return os.ModeIrregular
}

// statKey identifies one version of a file's content: a write changes
// its size or times.
type statKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// hashes caches files' digests by statKey, shared by every read in the
// process (an agent reads its node's sets on each scrape).
var hashes = struct {
	sync.Mutex
	m map[statKey]string
}{m: map[statKey]string{}}

// maxCached bounds the cache; it starts over when full.
const maxCached = 1 << 16

// hashAt returns the SHA-256 (hex) of the regular file name in dfd,
// opened without following a link and non-blocking.
func hashAt(dfd int, name, full string, st *unix.Stat_t) (string, error) {
	k := statKey{uint64(st.Dev), st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()}
	hashes.Lock()
	sum, ok := hashes.m[k]
	hashes.Unlock()
	if ok {
		return sum, nil
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &os.PathError{Op: "open", Path: full, Err: err}
	}
	f := os.NewFile(uintptr(fd), full)
	defer f.Close()
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return "", &os.PathError{Op: "stat", Path: full, Err: err}
	}
	if now.Mode&unix.S_IFMT != unix.S_IFREG {
		return "type:" + safefile.TypeName(fileType(now.Mode)), nil
	}
	k = statKey{uint64(now.Dev), now.Ino, now.Size, now.Mtim.Nano(), now.Ctim.Nano()}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxFile+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", full, err)
	}
	if n > maxFile {
		return "", fmt.Errorf("reading %s: larger than %d bytes", full, maxFile)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if time.Since(time.Unix(now.Ctim.Unix())) < 2*time.Second {
		// Changed a moment ago: a write within the same clock tick
		// would leave the same key, so this one is not kept.
		return sum, nil
	}
	hashes.Lock()
	if len(hashes.m) >= maxCached {
		clear(hashes.m)
	}
	hashes.m[k] = sum
	hashes.Unlock()
	return sum, nil
}

// HashFile returns the SHA-256 (hex) and modification time of the
// regular file at tree path rel below root, read as the sets are:
// beneath root with no link followed, non-blocking, bounded, through the
// same cache.
func HashFile(root, rel string) (string, time.Time, error) {
	full := root + "/" + rel
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", time.Time{}, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	pfd, err := safefile.OpenDirBeneath(rfd, parent(rel))
	if err != nil {
		return "", time.Time{}, &os.PathError{Op: "opening", Path: full, Err: err}
	}
	defer unix.Close(pfd)
	name := path.Base(rel)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", time.Time{}, &os.PathError{Op: "opening", Path: full, Err: err}
	}
	mtime := time.Unix(st.Mtim.Unix())
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return "", mtime, fmt.Errorf("%s is not a regular file (%s)", full, safefile.TypeName(fileType(st.Mode)))
	case st.Size > maxFile:
		return "", mtime, fmt.Errorf("%s is larger than %d bytes", full, maxFile)
	}
	sum, err := hashAt(pfd, name, full, &st)
	return sum, mtime, err
}
