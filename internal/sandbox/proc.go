package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The sandbox's /proc is a new proc of its PID namespace. Inside a user
// namespace the kernel mounts one only when the caller's mount namespace
// already shows a proc whole; a node's /proc with a read-only /proc/sys
// over it (as container runtimes mount it) does not. So the child opens
// the proc file system context (which takes its PID and network
// namespaces) and hands it to the parent, which creates and mounts it
// from the host's side, where that rule does not apply, and hands the
// detached mount back to be attached in the view.

// procFD is the child's end of the socket for that exchange.
const procFD = 5

// procPair returns the two ends of the exchange's socket.
func procPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socket for /proc: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "proc-parent"), os.NewFile(uintptr(fds[1]), "proc-child"), nil
}

// serveProc takes the child's proc context, creates and mounts it, and
// sends the mount back. A child that ends before asking is not an error
// here (its status says why).
func serveProc(ctx context.Context, f *os.File) error {
	c, err := net.FileConn(f)
	if err != nil {
		return fmt.Errorf("socket for /proc: %w", err)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = uc.SetDeadline(deadline)
	fsfd, err := recvFD(uc)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("receiving the /proc context: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("creating /proc: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	defer unix.Close(mfd)
	// Only a proc goes back (the child's side runs strata's code alone,
	// but the exchange takes no one's word for it).
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(mfd, &sfs); err != nil || sfs.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("mounting /proc: the context handed over is not proc's")
	}
	if _, _, err := uc.WriteMsgUnix([]byte{1}, unix.UnixRights(mfd), nil); err != nil {
		return fmt.Errorf("sending /proc: %w", err)
	}
	return nil
}

// recvFD receives one descriptor.
func recvFD(c *net.UnixConn) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, err
	}
	if n == 0 && oobn == 0 {
		return -1, io.EOF
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor in the message")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("not one descriptor in the message")
	}
	return fds[0], nil
}

// mountProc is the child's side: it opens a proc context, has the parent
// make it a mount, and attaches that at dir.
func mountProc(dir string) error {
	fsfd, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen proc: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.Sendmsg(procFD, []byte{1}, unix.UnixRights(fsfd), nil, 0); err != nil {
		return fmt.Errorf("handing /proc over: %w", err)
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(procFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return fmt.Errorf("receiving /proc: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("receiving /proc: the parent could not mount it")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return fmt.Errorf("receiving /proc: not one descriptor")
	}
	defer unix.Close(fds[0])
	if err := unix.MoveMount(fds[0], "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching /proc: %w", err)
	}
	return nil
}
