package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// execEnv is the environment of commands run with Exec.
var execEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "SYSTEMD_PAGER=", "TERM=dumb"}

// Exec runs argv inside the node (all its namespaces, its root and
// working directory, via nsenter; no shell) and returns its output. The
// error is an *exec.ExitError (wrapped) when the command failed. When
// ctx ends the command's whole process group is killed.
func (n *Node) Exec(ctx context.Context, argv ...string) (stdout, stderr []byte, err error) {
	if len(argv) == 0 {
		return nil, nil, errors.New("testnode: exec: no command")
	}
	n.mu.Lock()
	b := n.cur
	n.mu.Unlock()
	if b == nil {
		return nil, nil, fmt.Errorf("testnode: exec %q on node %s: not running", argv, n.cfg.Name)
	}
	pid := strconv.Itoa(b.cmd.Process.Pid)
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", pid, "-m", "-p", "-u", "-i", "-n", "-C", "-r", "-w", "--"}, argv...)...)
	cmd.Env = execEnv
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	// In the node's cgroup, so that stopping the node kills it too; in
	// its own process group, so that ctx kills nsenter's child as well.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: int(b.cgfd.Fd()), Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = startOnSpawner(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return out.Bytes(), errb.Bytes(), fmt.Errorf("testnode: exec %q on node %s: %w: %s", argv, n.cfg.Name, err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), errb.Bytes(), nil
}

// WaitRunning waits until the node's systemd has finished booting
// (systemctl is-system-running --wait). A degraded system is accepted:
// its failed units are logged to t. Any other final state is an error
// naming the failed units.
func (n *Node) WaitRunning(ctx context.Context) error {
	t := n.t
	for {
		out, _, err := n.Exec(ctx, "systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(string(out))
		switch {
		case state == "running":
			n.logBoot(t, state)
			return nil
		case state == "degraded":
			failed, ferr := n.FailedUnits(ctx)
			n.logBoot(t, state)
			t.Logf("node %s is degraded: failed units %q %v", n.cfg.Name, failed, ferr)
			return nil
		case state == "" || state == "offline" || state == "unknown":
			// systemd is not listening yet, or is gone.
			if err := n.exited(); err != nil {
				return err
			}
		default:
			failed, _ := n.FailedUnits(ctx)
			return fmt.Errorf("testnode: waiting for node %s: system is %s (failed units %q): %w", n.cfg.Name, state, failed, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("testnode: waiting for node %s (last state %q): %w", n.cfg.Name, state, err)
		}
	}
}

// logBoot logs how long the current boot took to reach its state.
func (n *Node) logBoot(t testing.TB, state string) {
	n.mu.Lock()
	since := time.Since(n.lastBoot)
	n.mu.Unlock()
	t.Logf("node %s (pid %d) %s %v after launch", n.cfg.Name, n.PID(), state, since.Round(time.Millisecond))
}

// FailedUnits lists the node's failed units.
func (n *Node) FailedUnits(ctx context.Context) ([]string, error) {
	out, _, err := n.Exec(ctx, "systemctl", "list-units", "--state=failed", "--plain", "--no-legend", "--no-pager")
	if err != nil {
		return nil, err
	}
	var units []string
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			units = append(units, f[0])
		}
	}
	return units, nil
}

// logTails logs the end of the node's console and launcher logs (for a
// failed test).
func (n *Node) logTails(t testing.TB) {
	for _, f := range []string{n.ConsoleLog(), filepath.Join(n.work, "launcher.log")} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		t.Logf("node %s: %s (end):\n%s", n.cfg.Name, filepath.Base(f), data)
	}
}

// exited returns an error when the node's current boot is over (its
// systemd exited or was never started).
func (n *Node) exited() error {
	n.mu.Lock()
	b := n.cur
	n.mu.Unlock()
	if b == nil {
		return fmt.Errorf("testnode: node %s is not running", n.cfg.Name)
	}
	select {
	case <-b.done:
		return fmt.Errorf("testnode: the systemd of node %s exited: %v (console: %s)", n.cfg.Name, b.cmd.ProcessState, n.ConsoleLog())
	default:
		return nil
	}
}
