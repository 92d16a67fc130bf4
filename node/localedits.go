package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// ErrLocalEdit reports an apply refused because it would replace or
// delete files changed on the node since its head (a local edit), which
// would vanish without a trace.
var ErrLocalEdit = manifests.Rejection("files changed on the node")

// coveredType is the type localEdits gives a path another mount covers
// on a sealed node: it matches no entry's.
const coveredType = "covered by a mount"

// localEdits lists, sorted, the paths the overlays todo write or delete
// that the node has changed since its head, whose tree is before: a file
// or link whose type, mode, owner, content or target differs, or one the
// head does not have. Directories are not compared (an overlay only sets
// their owner and mode). The node's files are read beneath root, no link
// followed.
//
// On a sealed node (sealed lists the mounts of its root and stacks; see
// nodestate.Sealed) no hand edit can change a file's content: content
// is not read, and a path on any other mount (a bind mount over a file
// or a directory above it) counts as changed.
//
// It returns every such path, and apart the ones another mount covers
// (a subset): those are not edits the head's files would undo.
func localEdits(ctx context.Context, root string, before tree.State, todo []*archive.Archive, sealed map[uint64]bool) (edited, covered []string, err error) {
	r, err := newEntryReader(root)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	r.sealed = sealed
	seen := map[string]bool{}
	check := func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		want, inHead := before[p]
		if inHead && want.Type == manifests.TypeDir {
			return nil
		}
		wantSize := int64(-1)
		if inHead && want.Type == manifests.TypeFile {
			wantSize = want.Size
		}
		got, there, err := r.entry(ctx, p, wantSize)
		if err != nil {
			return fmt.Errorf("checking /%s for local edits: %w", p, err)
		}
		switch {
		case !there && !inHead:
		case got.Type == coveredType:
			edited, covered = append(edited, p), append(covered, p)
		case !there || !inHead || got.Type == manifests.TypeDir:
			edited = append(edited, p)
		case got.Type != want.Type || got.Mode != want.Mode || got.UID != want.UID || got.GID != want.GID ||
			got.Size != want.Size || got.Target != want.Target:
			edited = append(edited, p)
		case sealed == nil && got.SHA256 != want.SHA256:
			edited = append(edited, p)
		}
		return nil
	}
	for _, a := range todo {
		m := a.Manifest
		for _, e := range m.Entries {
			if err := check(e.Path); err != nil {
				return nil, nil, err
			}
		}
		for _, d := range m.Deletes {
			if err := check(d); err != nil {
				return nil, nil, err
			}
		}
	}
	sort.Strings(edited)
	sort.Strings(covered)
	return edited, covered, nil
}

// overwrites refuses a batch that would replace or delete what was
// changed on the node (ErrLocalEdit), unless force, when it says so and
// notes on each plan what its overlay overwrites.
func overwrites(ctx context.Context, b nodestate.Backend, root string, states map[string][2]tree.State, todo []*archive.Archive, rep *ApplyReport, force bool, progress func(string)) error {
	if len(todo) == 0 {
		return nil
	}
	var sealed map[uint64]bool
	if s, ok := b.(nodestate.Sealed); ok {
		var err error
		if sealed, err = s.SealedMounts(); err != nil {
			return fmt.Errorf("node %s: checking for local edits: %w", root, err)
		}
	}
	edited, covered, err := localEdits(ctx, root, states[todo[0].Manifest.Version][0], todo, sealed)
	if err != nil || len(edited) == 0 {
		return err
	}
	if !force {
		return refuseLocalEdits(root, edited, covered)
	}
	progress(fmt.Sprintf("overwriting what was changed on the node (--force; the ledger records it): /%s", strings.Join(edited, ", /")))
	assignOverwrites(rep, todo, edited)
	return nil
}

// refuseLocalEdits is the error for an apply that would overwrite edited,
// of which another mount covers covered.
func refuseLocalEdits(root string, edited, covered []string) error {
	var changed []string
	for _, p := range edited {
		if !slices.Contains(covered, p) {
			changed = append(changed, p)
		}
	}
	var why []string
	if len(changed) > 0 {
		why = append(why, fmt.Sprintf("%s changed on the node since its head, and the overlays would replace or delete them: publish the change as an overlay (strata overlay create), put the head's files back (strata verify-sequence --files lists what differs), or overwrite them with apply-overlay --force, which the ledger records",
			pathList(changed)))
	}
	if len(covered) > 0 {
		why = append(why, fmt.Sprintf("%s covered by a mount on the node (a bind mount or a file system over it or a directory above it; findmnt shows which), and the overlays would replace or delete them beneath it, where nothing would see the change: unmount it and apply again, or apply-overlay --force, which the ledger records",
			pathList(covered)))
	}
	return fmt.Errorf("node %s: %s: %w", root, strings.Join(why, "; "), ErrLocalEdit)
}

// pathList names up to 10 paths, and how many more there are.
func pathList(paths []string) string {
	shown := paths
	if len(shown) > 10 {
		shown = shown[:10]
	}
	list := "/" + strings.Join(shown, ", /")
	if len(paths) > len(shown) {
		list += fmt.Sprintf(" and %d more", len(paths)-len(shown))
	}
	return list
}

// entryReader reads what a node has at paths beneath its root: one
// descriptor of the root, one of each directory met, and one buffer and
// hash for every file's content, however many paths are read.
type entryReader struct {
	root string
	rfd  int
	dirs map[string]int // directory beneath root -> O_PATH descriptor, or -1 when absent
	buf  []byte
	h    hash.Hash
	// sealed, when set, are the mounts a sealed node's files are on:
	// content is not read, and a path on another mount is coveredType.
	sealed map[uint64]bool
}

func newEntryReader(root string) (*entryReader, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	return &entryReader{root: root, rfd: rfd, dirs: map[string]int{}, buf: make([]byte, 128<<10), h: sha256.New()}, nil
}

// Close closes the descriptors r holds.
func (r *entryReader) Close() {
	for _, fd := range r.dirs {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	unix.Close(r.rfd)
}

// dir opens dir beneath the root, no link followed, once; -1 when it is
// not there (or a parent is not a directory).
func (r *entryReader) dir(dir string) (int, error) {
	if fd, ok := r.dirs[dir]; ok {
		return fd, nil
	}
	fd, err := safefile.OpenDirBeneath(r.rfd, dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		fd, err = -1, nil
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	r.dirs[dir] = fd
	return fd, nil
}

// entry describes what the node has at rel: type, mode, owner, and a
// file's size and SHA-256 or a link's target. It is reached beneath the
// root, no link followed on the way; there is false when nothing is there
// (or a parent is not a directory). A regular file whose size is not
// wantSize (-1: any) is not read: its SHA256 is left empty, since the
// size already tells it apart.
func (r *entryReader) entry(ctx context.Context, rel string, wantSize int64) (e manifests.Entry, there bool, err error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	dfd, err := r.dir(dir)
	if err != nil || dfd < 0 {
		return e, false, err
	}
	var st unix.Statx_t
	if err := unix.Statx(dfd, base, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_BASIC_STATS|unix.STATX_MNT_ID, &st); errors.Is(err, unix.ENOENT) {
		return e, false, nil
	} else if err != nil {
		return e, false, &os.PathError{Op: "stat", Path: rel, Err: err}
	}
	e = manifests.Entry{Path: rel, Mode: manifests.Mode(st.Mode & 0o7777), UID: int(st.Uid), GID: int(st.Gid)}
	if r.sealed != nil && (st.Mask&unix.STATX_MNT_ID == 0 || !r.sealed[st.Mnt_id]) {
		e.Type = coveredType
		return e, true, nil
	}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type = manifests.TypeDir
	case unix.S_IFLNK:
		e.Type = manifests.TypeSymlink
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dfd, base, buf)
		if err != nil {
			return e, false, &os.PathError{Op: "readlink", Path: rel, Err: err}
		}
		e.Target = string(buf[:n])
	case unix.S_IFREG:
		e.Type = manifests.TypeFile
		e.Size = int64(st.Size)
		if r.sealed != nil || wantSize >= 0 && e.Size != wantSize {
			return e, true, nil
		}
		if e.Size, e.SHA256, err = r.hash(ctx, dfd, base, rel); err != nil {
			return e, false, err
		}
	default:
		e.Type = "special"
	}
	return e, true, nil
}

// hash reads the file base in dfd to its end and returns its size and
// SHA-256, stopping when ctx is done.
func (r *entryReader) hash(ctx context.Context, dfd int, base, rel string) (int64, string, error) {
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, "", &os.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	r.h.Reset()
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return 0, "", fmt.Errorf("hashing %s: %w", rel, err)
		}
		n, err := unix.Read(fd, r.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, "", fmt.Errorf("hashing %s: %w", rel, &os.PathError{Op: "read", Path: rel, Err: err})
		}
		if n == 0 {
			break
		}
		r.h.Write(r.buf[:n])
		size += int64(n)
	}
	return size, hex.EncodeToString(r.h.Sum(nil)), nil
}

// assignOverwrites records each path of edited on the plan of the first
// overlay of todo that writes or deletes it.
func assignOverwrites(rep *ApplyReport, todo []*archive.Archive, edited []string) {
	left := map[string]bool{}
	for _, p := range edited {
		left[p] = true
	}
	for _, a := range todo {
		plan := &rep.Plans[indexOf(rep.Plans, a.Manifest.Version)]
		take := func(p string) {
			if left[p] {
				plan.Overwrote = append(plan.Overwrote, p)
				delete(left, p)
			}
		}
		for _, e := range a.Manifest.Entries {
			take(e.Path)
		}
		for _, d := range a.Manifest.Deletes {
			take(d)
		}
		sort.Strings(plan.Overwrote)
	}
}
