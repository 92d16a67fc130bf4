package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/archive"
	"github.com/strata-dev/strata/internal/ctxio"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// ErrLocalEdit reports an apply refused because it would replace or
// delete files changed on the node since its head (a local edit), which
// would vanish without a trace.
var ErrLocalEdit = manifests.Rejection("files changed on the node")

// localEdits lists, sorted, the paths the overlays todo write or delete
// that the node has changed since its head, whose tree is before: a file
// or link whose type, mode, owner, content or target differs, or one the
// head does not have. Directories are not compared (an overlay only sets
// their owner and mode). The node's files are read beneath root, no link
// followed.
func localEdits(ctx context.Context, root string, before tree.State, todo []*archive.Archive) ([]string, error) {
	seen := map[string]bool{}
	var edited []string
	check := func(p string) error {
		if seen[p] {
			return nil
		}
		seen[p] = true
		want, inHead := before[p]
		if inHead && want.Type == manifests.TypeDir {
			return nil
		}
		got, there, err := nodeEntry(ctx, root, p)
		if err != nil {
			return fmt.Errorf("checking /%s for local edits: %w", p, err)
		}
		switch {
		case !there && !inHead:
		case !there || !inHead || got.Type == manifests.TypeDir:
			edited = append(edited, p)
		case got.Type != want.Type || got.Mode != want.Mode || got.UID != want.UID || got.GID != want.GID ||
			got.SHA256 != want.SHA256 || got.Target != want.Target:
			edited = append(edited, p)
		}
		return nil
	}
	for _, a := range todo {
		m := a.Manifest
		for _, e := range m.Entries {
			if err := check(e.Path); err != nil {
				return nil, err
			}
		}
		for _, d := range m.Deletes {
			if err := check(d); err != nil {
				return nil, err
			}
		}
	}
	sort.Strings(edited)
	return edited, nil
}

// overwrites refuses a batch that would replace or delete what was
// changed on the node (ErrLocalEdit), unless force, when it says so and
// notes on each plan what its overlay overwrites.
func overwrites(ctx context.Context, root string, states map[string][2]tree.State, todo []*archive.Archive, rep *ApplyReport, force bool, progress func(string)) error {
	if len(todo) == 0 {
		return nil
	}
	edited, err := localEdits(ctx, root, states[todo[0].Manifest.Version][0], todo)
	if err != nil || len(edited) == 0 {
		return err
	}
	if !force {
		return refuseLocalEdits(root, edited)
	}
	progress(fmt.Sprintf("overwriting what was changed on the node (--force; the ledger records it): /%s", strings.Join(edited, ", /")))
	assignOverwrites(rep, todo, edited)
	return nil
}

// refuseLocalEdits is the error for an apply that would overwrite edited.
func refuseLocalEdits(root string, edited []string) error {
	shown := edited
	if len(shown) > 10 {
		shown = shown[:10]
	}
	list := "/" + strings.Join(shown, ", /")
	if len(edited) > len(shown) {
		list += fmt.Sprintf(" and %d more", len(edited)-len(shown))
	}
	return fmt.Errorf("node %s: %s changed on the node since its head, and the overlays would replace or delete them: publish the change as an overlay (strata overlay create), put the head's files back (strata verify-sequence --files lists what differs), or overwrite them with apply-overlay --force, which the ledger records: %w",
		root, list, ErrLocalEdit)
}

// nodeEntry describes what the node has at rel: type, mode, owner, and a
// file's size and SHA-256 or a link's target. It is reached beneath
// root, no link followed on the way; there is false when nothing is there
// (or a parent is not a directory).
func nodeEntry(ctx context.Context, root, rel string) (e manifests.Entry, there bool, err error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return e, false, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	dfd, err := safefile.OpenDirBeneath(rfd, dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return e, false, nil
	}
	if err != nil {
		return e, false, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return e, false, nil
	} else if err != nil {
		return e, false, &os.PathError{Op: "stat", Path: rel, Err: err}
	}
	e = manifests.Entry{Path: rel, Mode: manifests.Mode(st.Mode & 0o7777), UID: int(st.Uid), GID: int(st.Gid)}
	switch st.Mode & unix.S_IFMT {
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
		fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return e, false, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, ctxio.NewReader(ctx, f))
		if err != nil {
			return e, false, fmt.Errorf("hashing %s: %w", rel, err)
		}
		e.Size, e.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	default:
		e.Type = "special"
	}
	return e, true, nil
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
