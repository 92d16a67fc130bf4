package overlayfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/mountinfo"
	"github.com/strata-dev/strata/internal/safefile"
)

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux 6.5).
const moveMountBeneath = 0x00000200

// mountInfo is one line of the mount table.
type mountInfo = mountinfo.Mount

// mounts reads the mount table of the calling thread (a thread may have
// a private mount namespace: see RunStaged).
var mounts = mountinfo.Read

// topMount returns the mount visible at point (the last one mounted
// there), if any.
func topMount(ms []mountInfo, point string) (mountInfo, bool) {
	var top mountInfo
	found := false
	for _, m := range ms {
		if m.Point == point {
			top, found = m, true
		}
	}
	return top, found
}

// mountStack builds a read-only overlayfs of lowers (absolute paths, top
// first) as a detached mount and returns its descriptor. Kernels with the
// "lowerdir+" parameter (6.8) take one layer at a time, so a stack can be
// as deep as overlayfs allows (500 layers); older ones get the list in
// one mount(2) option string, at most a page, through a private staging
// mount point below tmp that is cloned and detached at once.
func mountStack(tmp string, lowers []string) (int, error) {
	for _, l := range lowers {
		if !filepath.IsAbs(l) || strings.ContainsAny(l, ":,\\\n") {
			return -1, fmt.Errorf("overlay lower %q: not an absolute path or an unsupported character", l)
		}
	}
	if len(lowers) > maxLayers {
		return -1, fmt.Errorf("overlay of %d layers: at most %d: %w", len(lowers), maxLayers, ErrTooDeep)
	}
	if !hasLowerdirPlus() {
		return mountStackLegacy(tmp, lowers)
	}
	fd, err := mountStackFD(lowers)
	if !errors.Is(err, errNoLowerdirPlus) {
		return fd, err
	}
	return mountStackLegacy(tmp, lowers)
}

// hasLowerdirPlus probes whether overlayfs parses its parameters itself
// (Linux 5.x-6.4 pass them through the legacy parser, which takes any key
// at fsconfig time and fails only at create): a key no file system has is
// refused by a real parser and taken by the legacy one. Kernels from 6.5
// to 6.7 parse but lack lowerdir+, which mountStackFD sees at once.
var hasLowerdirPlus = sync.OnceValue(func() bool {
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fs)
	return unix.FsconfigSetString(fs, "strata-probe", "x") != nil
})

// maxLayers is overlayfs's limit on lower layers (OVL_MAX_STACK).
const maxLayers = 500

// ErrTooDeep reports a stack with more layers than the kernel can stack;
// compacting the node onto a regenerated image is the way out.
var ErrTooDeep = errors.New("overlayfs: too many layers to stack")

var errNoLowerdirPlus = errors.New("overlayfs: kernel has no lowerdir+")

// mountStackFD builds the stack with the mount API, one lowerdir+ each.
func mountStackFD(lowers []string) (int, error) {
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "source", "strata"); err != nil {
		return -1, fmt.Errorf("overlay source: %w", err)
	}
	for i, l := range lowers {
		if err := unix.FsconfigSetString(fs, "lowerdir+", l); err != nil {
			if i == 0 && errors.Is(err, unix.EINVAL) {
				return -1, errNoLowerdirPlus
			}
			return -1, fmt.Errorf("overlay lower %s: %w", l, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("creating overlay of %s: %w", strings.Join(lowers, ":"), err)
	}
	mfd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount overlay of %s: %w", strings.Join(lowers, ":"), err)
	}
	return mfd, nil
}

// mountStackLegacy builds the stack with mount(2) on a staging directory
// below tmp, clones it detached and removes the staging mount.
func mountStackLegacy(tmp string, lowers []string) (int, error) {
	opt := "lowerdir=" + strings.Join(lowers, ":")
	if len(opt) >= 4000 {
		return -1, fmt.Errorf("overlay of %d layers: its lower directory list of %d bytes does not fit one mount option on this kernel (before Linux 6.8): %w", len(lowers), len(opt), ErrTooDeep)
	}
	if err := safefile.MkdirAll(tmp, 0o700); err != nil {
		return -1, fmt.Errorf("staging a stack: %w", err)
	}
	dir, err := os.MkdirTemp(tmp, "stack-")
	if err != nil {
		return -1, fmt.Errorf("staging a stack: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("strata", dir, "overlay", unix.MS_RDONLY|unix.MS_NODEV, opt); err != nil {
		return -1, fmt.Errorf("mounting overlay of %s: %w", strings.Join(lowers, ":"), err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("cloning the staged stack: %w", err)
	}
	return fd, nil
}

// attach puts the detached mount mfd at target. When target already has
// a stack of ours on top (replace), the new one goes beneath it and the
// old one is detached: lookups see the old stack, then the new one, never
// neither. Kernels without MOVE_MOUNT_BENEATH get the new stack mounted
// over the old one, which stays underneath until the next boot. Mounts
// below target (systemd's transient /etc/machine-id, for one) are cloned
// onto the new stack first, so they survive the switch.
func attach(mfd int, target string, replace bool, ms []mountInfo) error {
	subs, err := cloneSubmounts(target, ms)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range subs {
			unix.Close(s.fd)
		}
	}()
	beneath := false
	if replace {
		err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH|moveMountBeneath)
		switch {
		case err == nil:
			beneath = true
		case !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS):
			return fmt.Errorf("mounting stack beneath %s: %w", target, err)
		}
	}
	if !beneath {
		if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mounting stack on %s: %w", target, err)
		}
	}
	for _, s := range subs {
		err := unix.MoveMount(s.fd, "", mfd, s.rel, unix.MOVE_MOUNT_F_EMPTY_PATH)
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			if !beneath {
				// Mounted over the old stack: the new one is on top,
				// and unmounting it through its descriptor leaves the
				// old one in effect. (Slid beneath, the old stack is
				// still on top and the path would reach it: the new
				// one stays hidden below it until the next switch.)
				_ = unix.Unmount("/proc/self/fd/"+strconv.Itoa(mfd), unix.MNT_DETACH)
			}
			return fmt.Errorf("carrying the mount on %s/%s over to the new stack: %w", target, s.rel, err)
		}
	}
	if beneath {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("detaching the old stack of %s: %w", target, err)
		}
	}
	return nil
}

// submount is a clone of a mount below a stack, to attach at rel.
type submount struct {
	fd  int
	rel string
}

// cloneSubmounts clones (with what is mounted below them) the mounts
// directly below the mount visible at target whose mount points lie
// inside target.
func cloneSubmounts(target string, ms []mountInfo) ([]submount, error) {
	parent, ok := containing(ms, target)
	if !ok {
		return nil, nil
	}
	var out []submount
	for _, m := range ms {
		rel, inside := strings.CutPrefix(m.Point, target+"/")
		if m.Parent != parent.ID || !inside || rel == "" {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Point, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			for _, s := range out {
				unix.Close(s.fd)
			}
			return nil, fmt.Errorf("cloning the mount on %s: %w", m.Point, err)
		}
		out = append(out, submount{fd: fd, rel: rel})
	}
	return out, nil
}

// containing returns the mount that path lies in: the last mounted one
// whose mount point is path or its nearest parent.
func containing(ms []mountInfo, path string) (mountInfo, bool) {
	var best mountInfo
	found := false
	for _, m := range ms {
		if m.Point == path || m.Point == "/" || strings.HasPrefix(path, m.Point+"/") {
			if !found || len(m.Point) >= len(best.Point) {
				best, found = m, true
			}
		}
	}
	return best, found
}

// cloneRoot mounts a non-recursive clone of the mount at root (the image,
// without the stacks or anything else mounted below it) read-only at dir.
func cloneRoot(root, dir string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, root, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("cloning the image mount %s: %w", root, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("making the image clone read-only: %w", err)
	}
	if err := safefile.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the image clone at %s: %w", dir, err)
	}
	return nil
}

// isMountPoint reports whether dir has a mount of its own.
func isMountPoint(ms []mountInfo, dir string) bool {
	_, ok := topMount(ms, filepath.Clean(dir))
	return ok
}
