package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// privateEnv marks a process Reexec started in a mount namespace of its
// own.
const privateEnv = "STRATA_PRIVATE_MOUNT_NS"

// ErrNotPrivate reports an attempt to mount a disk's partitions from a
// process that shares its mount namespace (see Reexec).
var ErrNotPrivate = errors.New("not running in a private mount namespace")

// InPrivateNamespace reports whether this process runs in a mount
// namespace of its own that Reexec made: the marker Reexec sets is in
// the environment and the namespace differs from the parent's. Mounts
// made there are invisible outside and go when the process ends, however
// it ends.
func InPrivateNamespace() bool {
	if os.Getenv(privateEnv) != "1" {
		return false
	}
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	return err != nil || self != parent // no parent to compare: it left
}

// cancelGrace is how long a cancelled Reexec child gets to finish after
// SIGTERM before it is killed.
const cancelGrace = 30 * time.Second

// Reexec runs this executable again with args in a new mount namespace
// whose mounts are private (Go makes / recursively private in the child),
// with the given standard streams, and returns its exit code. Work on an
// offline disk (MountNode, Apply, Verify) runs in such a child: nothing
// it mounts can leak into the caller's namespace. When ctx ends, the
// child gets SIGTERM, and SIGKILL if it is still running 30 s later; it
// also gets SIGTERM if the caller dies.
func Reexec(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("re-executing in a private mount namespace: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = append(os.Environ(), privateEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = cancelGrace
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("running %s in a private mount namespace: %w", exe, err)
	}
	return 0, nil
}
