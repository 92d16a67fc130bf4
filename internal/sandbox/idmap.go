package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// idmapNS is the process's one descriptor of the id-mapping namespace,
// made when first needed and kept open.
var idmapNS = sync.OnceValues(idmapNamespace)

// MapInPlace mounts over each path (a directory) a clone of what is
// there with the sandbox's id mapping, in the calling thread's private
// mount namespace (see RunHere): a tree stacked from such paths (an
// overlayfs of layer directories, say) shows its owners inside the
// sandbox as they are on disk. A path whose file system refuses the
// mapping is left as it is and returned.
func MapInPlace(paths ...string) (unmapped []string, err error) {
	userns, err := idmapNS()
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return nil, fmt.Errorf("%w: cloning %s: %w", ErrSandbox, p, err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			unix.Close(fd)
			unmapped = append(unmapped, p)
			continue
		}
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("%w: mounting the id-mapped clone of %s: %w", ErrSandbox, p, err)
		}
	}
	return unmapped, nil
}

// idmapNamespace returns a descriptor of a user namespace with the
// sandbox's id mapping, to give mounts of the view the same mapping: a
// file owned by uid 0 in the tree then shows as HostIDBase on the host
// and as 0 inside the sandbox. The namespace's only process (a
// re-execution that waits for its standard input to close) ends at once;
// the namespace lives as long as the descriptor.
func idmapNamespace() (int, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{holderArg0}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: HostIDBase, Size: mapSize}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: HostIDBase, Size: mapSize}},
		Pdeathsig:   syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, fmt.Errorf("%w: id mapping: %w", ErrSandbox, err)
	}
	if err := cmd.Start(); err != nil {
		stdin.Close()
		return -1, fmt.Errorf("%w: id mapping: starting %s again in a user namespace: %w%s", ErrSandbox, os.Args[0], err, userNSHint(err))
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	stdin.Close()
	_ = cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("%w: id mapping: %w", ErrSandbox, err)
	}
	return fd, nil
}

// userNSHint explains why the kernel may refuse a user namespace.
func userNSHint(err error) string {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSPC) {
		return ""
	}
	return " (the kernel refuses user namespaces to a process under chroot, and where user.max_user_namespaces is 0: run strata in the node's own root, not under chroot)"
}
