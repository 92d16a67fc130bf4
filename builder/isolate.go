package builder

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// hostPath is the PATH of commands strata runs for a build, on the host
// and inside a chroot alike.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildEnv is the whole environment of debootstrap and run steps: nothing
// of the caller's environment leaks in.
func buildEnv() []string {
	return []string{
		"PATH=" + hostPath,
		"HOME=/root",
		"LC_ALL=C",
		"LANG=C",
		"DEBIAN_FRONTEND=noninteractive",
		"DEBCONF_NONINTERACTIVE_SEEN=true",
	}
}

// isolated returns a command that runs as the first process of new PID,
// UTS, IPC and mount namespaces (the mount namespace private to it), in a
// session of its own: whatever it
// mounts is invisible outside and disappears with it, and when it exits,
// or strata dies, every process it started is killed.
func isolated(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// New PID, UTS (its own hostname) and IPC namespaces; a private
		// mount namespace; its own session, so no controlling terminal.
		Cloneflags:   syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		Unshareflags: syscall.CLONE_NEWNS,
		Setsid:       true,
		Pdeathsig:    syscall.SIGKILL,
	}
	cmd.Env = buildEnv()
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// runLines runs cmd with standard input from /dev/null, passing each line
// of its standard output and error to line. A failure quotes the last
// lines of output.
func runLines(cmd *exec.Cmd, line func(string)) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	tail := make(chan []string, 1)
	go func() { tail <- scanOutput(pr, line) }()
	err := cmd.Run()
	pw.Close()
	last := <-tail
	if err != nil {
		return fmt.Errorf("%s: %w; last output:\n%s", cmd.Path, err, strings.Join(last, "\n"))
	}
	return nil
}

// scanOutput passes each non-empty line read from r to line until r
// ends, and returns the last 12. Past an over-long line it reads r to
// its end unscanned.
func scanOutput(r io.Reader, line func(string)) []string {
	var tail []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sc.Split(scanLines)
	for sc.Scan() {
		l := sc.Text()
		if l == "" {
			continue
		}
		line(l)
		if tail = append(tail, l); len(tail) > 12 {
			tail = tail[1:]
		}
	}
	_, _ = io.Copy(io.Discard, r)
	return tail
}

// scanLines splits at "\n" and at "\r", which progress meters (dpkg, apt)
// use to redraw a line.
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
