package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/mountinfo"
	scratchdir "github.com/strata-dev/strata/internal/scratch"
)

// view is the sandbox's root, built in the caller's private mount
// namespace below base, a tmpfs that also takes every write.
type view struct {
	base string // a host temporary directory with the scratch tmpfs on it
	held *scratchdir.Dir
	root string // base/root: the view's "/"
	// unmapped lists the mounts (as paths inside the view) whose file
	// system refused the id mapping: their files' owners show as nobody
	// inside unless they are HostIDBase ids on the host.
	unmapped []string
	// writable: the view's root is the tree itself, bound read-write
	// (Spec.Writable), so nothing in it may be replaced.
	writable bool
}

// pseudo are the file systems a view never carries: the kernel's own
// (the sandbox gets a fresh /proc and /dev of its own) and memory-backed
// ones, whose contents are the running system's, not the tree's.
var pseudo = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "tmpfs": true, "ramfs": true,
	"cgroup": true, "cgroup2": true, "mqueue": true, "securityfs": true, "debugfs": true,
	"tracefs": true, "bpf": true, "configfs": true, "fusectl": true, "pstore": true,
	"efivarfs": true, "binfmt_misc": true, "hugetlbfs": true, "autofs": true, "nsfs": true,
	"rpc_pipefs": true, "nfsd": true, "selinuxfs": true,
	// Remote and user-space file systems: a server that never answers
	// would hang the parent, and their contents are not the tree's.
	"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "9p": true, "ceph": true,
	"fuse": true, "fuseblk": true, "fuse.sshfs": true, "glusterfs": true, "afs": true,
}

// carriable reports whether a mount of fstype is carried into a view.
func carriable(fstype string) bool {
	return !pseudo[fstype] && !strings.HasPrefix(fstype, "fuse.")
}

// replaced are the top-level directories the view gets fresh: nothing
// mounted below them in the tree is carried.
var replaced = []string{"proc", "sys", "dev", "run", "tmp"}

// buildView makes the view of the tree at root: its own mount and every
// mount below it that is not a pseudo file system, each cloned read-only
// (with the id mapping of userns where the file system allows it) under
// a copy-on-write overlay whose upper layer is on the scratch tmpfs.
func buildView(root string, userns int, scratch int64, writable bool) (*view, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: root %s is not a directory", ErrSandbox, root)
	}
	// The sandbox's first process, an unprivileged user, reaches the
	// view through this directory's path: a private $TMPDIR (0700) would
	// shut it out, so /tmp serves then.
	parent := os.TempDir()
	if !othersTraverse(parent) {
		parent = "/tmp"
	}
	held, err := scratchdir.MkdirTempIn(parent, "sandbox")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	base := held.Path
	v := &view{base: base, root: filepath.Join(base, "root"), held: held, writable: writable}
	if err := unix.Mount("strata-sandbox", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0711", scratch)); err != nil {
		held.RemoveAll()
		return nil, fmt.Errorf("%w: scratch tmpfs on %s: %w", ErrSandbox, base, err)
	}
	fail := func(err error) (*view, error) {
		v.close()
		return nil, err
	}
	for _, d := range []string{"root", "lower", "upper", "work"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o700); err != nil {
			return fail(fmt.Errorf("%w: %w", ErrSandbox, err))
		}
	}
	ms, err := mountinfo.Read()
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrSandbox, err))
	}
	rootfd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrSandbox, err))
	}
	defer unix.Close(rootfd)
	if writable {
		for _, m := range ms {
			if strings.HasPrefix(m.Point, strings.TrimSuffix(real, "/")+"/") {
				return fail(fmt.Errorf("%w: %s has a mount below it (%s): a writable tree must be one file system", ErrSandbox, root, m.Point))
			}
		}
		if err := v.bindWritable(rootfd, root, userns); err != nil {
			return fail(err)
		}
	} else {
		for i, c := range carried(ms, real) {
			if err := v.carry(i, rootfd, real, c, userns); err != nil {
				return fail(err)
			}
		}
	}
	if err := v.fresh(scratch); err != nil {
		return fail(err)
	}
	if !writable {
		if err := v.mask(); err != nil {
			return fail(err)
		}
	}
	return v, nil
}

// hiddenFiles are the files a view hides behind an empty file nobody in
// the sandbox may read: the login password hashes. hiddenDirs are the
// directories it hides behind an empty tmpfs: root's home (its SSH keys,
// shell history). A validation has no need of either; on a node's root
// they are the node's secrets. SSH host keys stay: sshd -t, the check of
// an sshd configuration, loads them.
var (
	hiddenFiles = []string{"etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-"}
	hiddenDirs  = []string{"root"}
)

// mask hides hiddenFiles and hiddenDirs in the view, where they are
// (reached beneath the view without following a link; a link there is
// left, as it leads only within the view).
func (v *view) mask() error {
	empty := filepath.Join(v.base, "empty")
	// Owned by the host's root, which the sandbox does not map: mode 0
	// and an unmapped owner keep even the sandbox's root out.
	if err := os.WriteFile(empty, nil, 0); err != nil {
		return fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	rfd, err := unix.Open(v.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer unix.Close(rfd)
	for _, rel := range hiddenFiles {
		fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			continue // not there, or reached through a link
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			continue
		}
		err = bindOver(empty, fd)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%w: hiding /%s: %w", ErrSandbox, rel, err)
		}
	}
	for _, rel := range hiddenDirs {
		err := v.tmpfs(rel, "0700", "4096", unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_RDONLY, false)
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			return err
		}
	}
	return nil
}

// bindOver mounts a clone of the file src over the file the descriptor
// target names.
func bindOver(src string, target int) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &ro); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// close detaches everything mounted for the view and removes its
// directory.
func (v *view) close() {
	_ = unix.Unmount(v.base, unix.MNT_DETACH)
	_ = v.held.RemoveAll()
}

// carried returns the mounts of the tree at root to carry into the view,
// as paths relative to root ("" for root's own), parents first: the
// topmost mount at each point below root, except pseudo file systems and
// anything below the directories the view replaces.
func carried(ms []mountinfo.Mount, root string) []carry {
	prefix := strings.TrimSuffix(root, "/") + "/"
	var cs []carry
	last := map[string]int{}
	for _, m := range ms {
		rel, ok := strings.CutPrefix(m.Point, prefix)
		if !ok || rel == "" || !carriable(m.FSType) || isReplaced(rel) {
			continue
		}
		last[rel] = len(cs)
		cs = append(cs, carry{rel: rel, id: m.ID})
	}
	out := []carry{{}}
	for i, c := range cs {
		if last[c.rel] == i {
			out = append(out, c)
		}
	}
	return out
}

// carry is a mount to carry into a view: its path below the root ("" for
// the root's own) and its mount id (0 for the root's).
type carry struct {
	rel string
	id  int
}

func isReplaced(rel string) bool {
	top, _, _ := strings.Cut(rel, "/")
	for _, r := range replaced {
		if top == r {
			return true
		}
	}
	return false
}

// carry clones the mount at root/rel (only it, not what is mounted below
// it) read-only, id-mapped where its file system allows, and mounts a
// copy-on-write overlay of it at the same place in the view.
func (v *view) carry(i, rootfd int, root string, c carry, userns int) error {
	rel := c.rel
	src := filepath.Join(root, rel)
	// The mount is reached beneath the root, never through a symbolic
	// link (one an uncarried mount holds could lead out of the tree),
	// and must be the one the table names: a mount hidden under a later
	// one, or a file bind-mounted (/etc/resolv.conf in a container), is
	// left as the tree shows it.
	at := rootfd
	if rel != "" {
		fd, err := unix.Openat2(rootfd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return nil
		}
		defer unix.Close(fd)
		var stx unix.Statx_t
		if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID, &stx); err != nil || stx.Mask&unix.STATX_MNT_ID == 0 || int(stx.Mnt_id) != c.id {
			return nil
		}
		at = fd
	}
	fd, err := unix.OpenTree(at, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_NO_AUTOMOUNT)
	if err != nil {
		return fmt.Errorf("%w: cloning the mount on %s: %w", ErrSandbox, src, err)
	}
	defer unix.Close(fd)
	idmap := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &idmap); err != nil {
		v.unmapped = append(v.unmapped, "/"+rel)
	}
	ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &ro); err != nil {
		return fmt.Errorf("%w: making the clone of %s read-only: %w", ErrSandbox, src, err)
	}
	n := strconv.Itoa(i)
	lower, upper, work := filepath.Join(v.base, "lower", n), filepath.Join(v.base, "upper", n), filepath.Join(v.base, "work", n)
	for _, d := range []string{lower, upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("%w: %w", ErrSandbox, err)
		}
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, lower, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: mounting the clone of %s: %w", ErrSandbox, src, err)
	}
	// The overlay's top directory takes its owner and mode from the
	// upper one: make them the tree's, as the clone shows them.
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, lower, unix.AT_STATX_DONT_SYNC, unix.STATX_UID|unix.STATX_GID|unix.STATX_MODE, &stx); err != nil {
		return fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	st := struct{ Uid, Gid, Mode uint32 }{stx.Uid, stx.Gid, uint32(stx.Mode)}
	if err := unix.Chown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	target, err := v.dir(rel, false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		// Hidden in the tree under another mount: nothing to carry.
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(target)
	ov, err := newMount("overlay", map[string]string{"lowerdir": lower, "upperdir": upper, "workdir": work}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("%w: copy-on-write overlay of %s: %w", ErrSandbox, src, err)
	}
	defer unix.Close(ov)
	if err := unix.MoveMount(ov, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: mounting the view of %s: %w", ErrSandbox, src, err)
	}
	return nil
}

// bindWritable mounts a clone of the tree's directory (only its own
// mount) at the view's root, read-write with the id mapping of userns:
// files the command makes as root are owned by uid 0 on disk.
func (v *view) bindWritable(rootfd int, root string, userns int) error {
	// The directories the view mounts on are made now, in the tree: the
	// caller's uid has no place in the id mapping, so it cannot create
	// anything through the mapped mount. mkdirat leaves whatever is
	// there (a link too) as it is.
	for _, d := range []struct {
		name string
		mode uint32
	}{{"dev", 0o755}, {"proc", 0o755}, {"run", 0o755}, {"tmp", 0o1777}} {
		if err := unix.Mkdirat(rootfd, d.name, d.mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: making %s/%s: %w", ErrSandbox, root, d.name, err)
		}
	}
	fd, err := unix.OpenTree(rootfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_NO_AUTOMOUNT)
	if err != nil {
		return fmt.Errorf("%w: cloning the mount on %s: %w", ErrSandbox, root, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("%w: %s: its file system refuses id-mapped mounts (%w); a writable sandbox tree needs one that allows them (ext4, xfs, btrfs, tmpfs)", ErrSandbox, root, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, v.root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: mounting %s writable: %w", ErrSandbox, root, err)
	}
	return nil
}

// dir opens the directory rel of the view (O_PATH), never following a
// symbolic link and never leaving the view. With make, a missing
// top-level directory is made and anything else there (a link, a file)
// is replaced by one: the view is copy-on-write, the tree is untouched.
func (v *view) dir(rel string, make bool) (int, error) {
	rfd, err := unix.Open(v.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer unix.Close(rfd)
	if rel == "" {
		return unix.FcntlInt(uintptr(rfd), unix.F_DUPFD_CLOEXEC, 0)
	}
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(rfd, rel, &how)
	if err == nil || !make || strings.Contains(rel, "/") {
		if err != nil {
			return -1, fmt.Errorf("%w: /%s in the view: %w", ErrSandbox, rel, err)
		}
		return fd, nil
	}
	if v.writable && !errors.Is(err, unix.ENOENT) {
		// The tree itself: what is there stays.
		return -1, fmt.Errorf("%w: /%s in the tree is not a directory: %w", ErrSandbox, rel, err)
	}
	wfd, err := unix.Open(v.root, unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer unix.Close(wfd)
	if !v.writable {
		_ = unix.Unlinkat(wfd, rel, 0)
	}
	if err := unix.Mkdirat(wfd, rel, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("%w: making /%s in the view: %w", ErrSandbox, rel, err)
	}
	fd, err = unix.Openat2(rfd, rel, &how)
	if err != nil {
		return -1, fmt.Errorf("%w: /%s in the view: %w", ErrSandbox, rel, err)
	}
	return fd, nil
}

// devices are the host's device nodes the view's /dev holds.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// fresh gives the view its own /dev, /dev/shm, /tmp and /run (tmpfs)
// and a directory for the /proc the sandbox mounts.
func (v *view) fresh(scratch int64) error {
	small := strconv.FormatInt(max(scratch/4, 1<<20), 10)
	for _, m := range []struct {
		rel, mode, size string
		attr            uint64
	}{
		{"dev", "0755", "1048576", unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_NODEV},
		{"tmp", "1777", small, unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV},
		{"run", "0755", small, unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV},
	} {
		err := v.tmpfs(m.rel, m.mode, m.size, m.attr, true)
		if v.writable && m.rel != "dev" && (errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)) {
			// A writable tree's /tmp or /run that is a link (or a file)
			// stays as the tree has it.
			continue
		}
		if err != nil {
			return err
		}
	}
	dev := filepath.Join(v.root, "dev")
	for _, d := range devices {
		if err := bindDevice("/dev/"+d, dev, d); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return fmt.Errorf("%w: /dev/%s: %w", ErrSandbox, name, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return fmt.Errorf("%w: /dev/%s: %w", ErrSandbox, d, err)
		}
	}
	if err := v.tmpfs("dev/shm", "1777", small, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false); err != nil {
		return err
	}
	fd, err := v.dir("proc", true)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// tmpfs mounts a fresh tmpfs at rel in the view.
func (v *view) tmpfs(rel, mode, size string, attr uint64, make bool) error {
	target, err := v.dir(rel, make)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	// Owned by the sandbox's root, as the tree's own directories are.
	id := strconv.Itoa(HostIDBase)
	fs, err := newMount("tmpfs", map[string]string{"source": "strata-sandbox", "mode": mode, "size": size, "nr_inodes": "65536", "uid": id, "gid": id}, attr)
	if err != nil {
		return fmt.Errorf("%w: tmpfs for /%s: %w", ErrSandbox, rel, err)
	}
	defer unix.Close(fs)
	if err := unix.MoveMount(fs, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: tmpfs on /%s: %w", ErrSandbox, rel, err)
	}
	return nil
}

// bindDevice binds the host's device node src onto a new empty file
// name in the directory dir (the view's fresh /dev).
func bindDevice(src, dir, name string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return fmt.Errorf("%w: /dev/%s: %w", ErrSandbox, name, err)
	}
	defer f.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("%w: cloning %s: %w", ErrSandbox, src, err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", int(f.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: binding %s: %w", ErrSandbox, src, err)
	}
	return nil
}

// newMount makes a detached mount of a new fstype file system with the
// given parameters and mount attributes, and returns its descriptor.
func newMount(fstype string, params map[string]string, attr uint64) (int, error) {
	fs, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen %s: %w", fstype, err)
	}
	defer unix.Close(fs)
	for _, k := range []string{"source", "lowerdir", "upperdir", "workdir", "mode", "size", "nr_inodes", "uid", "gid"} {
		if val, ok := params[k]; ok {
			if err := unix.FsconfigSetString(fs, k, val); err != nil {
				return -1, fmt.Errorf("%s %s=%s: %w", fstype, k, val, err)
			}
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("creating %s: %w", fstype, err)
	}
	mfd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, int(attr))
	if err != nil {
		return -1, fmt.Errorf("fsmount %s: %w", fstype, err)
	}
	return mfd, nil
}

// othersTraverse reports whether any user may search every directory on
// the way to dir (and dir itself).
func othersTraverse(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}
