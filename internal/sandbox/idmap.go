package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

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
		return -1, fmt.Errorf("%w: id mapping: starting %s again in a user namespace: %w", ErrSandbox, os.Args[0], err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	stdin.Close()
	_ = cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("%w: id mapping: %w", ErrSandbox, err)
	}
	return fd, nil
}
