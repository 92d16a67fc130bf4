package testnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// boot is one life of a node, from launch to SIGKILL.
type boot struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has been waited for
	link    string        // per-boot hard link to the image, or ""
	backing string        // the loop device's backing file: link or the image
	cgroup  string
	cgfd    *os.File
	status  launchStatus
}

// launch starts a new boot of the node and waits until the launcher has
// executed systemd.
func (n *Node) launch(ctx context.Context) (err error) {
	n.mu.Lock()
	n.boots++
	b := &boot{done: make(chan struct{}), link: filepath.Join(n.work, fmt.Sprintf("image-%d.squashfs", n.boots))}
	n.mu.Unlock()
	fail := func(err error) error {
		if b.cmd != nil && b.cmd.Process != nil {
			_ = b.cmd.Process.Kill()
		}
		return errors.Join(fmt.Errorf("testnode: starting node %s: %w", n.cfg.Name, err), n.cleanupBoot(b))
	}
	b.backing = b.link
	if err := os.Link(n.cfg.Image, b.link); err != nil {
		// Another filesystem: the loop device's backing file is the
		// image itself, which other nodes may share.
		b.link, b.backing = "", n.cfg.Image
	}
	if b.cgroup, b.cgfd, err = newCgroup(n.cfg.Name); err != nil {
		return fail(err)
	}
	var activate []string
	for _, a := range n.cfg.Activate {
		activate = append(activate, strings.ReplaceAll(a, "{root}", n.MountedRoot()))
	}
	spec, err := json.Marshal(launchSpec{
		Name: n.cfg.Name, Image: b.backing, Root: n.MountedRoot(), State: n.cfg.State, Console: n.ConsoleLog(),
		Activate: activate, Env: n.cfg.Env,
		Args: append([]string{"systemd.hostname=" + n.cfg.Name}, n.cfg.SystemdArgs...),
	})
	if err != nil {
		return fail(err)
	}
	console, err := os.OpenFile(n.ConsoleLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	console.Close()
	logf, err := os.OpenFile(filepath.Join(n.work, "launcher.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	exe, err := os.Executable()
	if err != nil {
		return fail(fmt.Errorf("finding the test binary: %w", err))
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Args[0] = "strata-testnode-launcher"
	cmd.Env = append(os.Environ(), launcherEnv+"="+string(spec))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
		// The node dies with the test binary, even on SIGINT or SIGKILL:
		// its PID 1 gets SIGKILL and the kernel kills the rest of its
		// PID namespace and drops its mounts.
		Pdeathsig:   syscall.SIGKILL,
		UseCgroupFD: true,
		CgroupFD:    int(b.cgfd.Fd()),
	}
	started := time.Now()
	err = startOnSpawner(cmd)
	w.Close()
	if err != nil {
		return fail(fmt.Errorf("running the launcher %s: %w", exe, err))
	}
	b.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	type result struct {
		msgs []launchStatus
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		dec := json.NewDecoder(r)
		for {
			var m launchStatus
			if err := dec.Decode(&m); err != nil {
				if !errors.Is(err, io.EOF) {
					res.err = fmt.Errorf("reading the launcher's status: %w", err)
				}
				break
			}
			res.msgs = append(res.msgs, m)
		}
		ch <- res
	}()
	var res result
	select {
	case <-ctx.Done():
		return fail(ctx.Err())
	case res = <-ch:
	}
	if res.err != nil {
		return fail(res.err)
	}
	if len(res.msgs) == 0 || res.msgs[len(res.msgs)-1].Err != "" {
		<-b.done
		msg := "the launcher exited without a status"
		if len(res.msgs) > 0 {
			msg = res.msgs[len(res.msgs)-1].Err
		}
		out, _ := os.ReadFile(filepath.Join(n.work, "launcher.log"))
		return fail(fmt.Errorf("%s (%s)\n%s", msg, cmd.ProcessState, out))
	}
	b.status = res.msgs[0]
	if n.net != nil {
		if err := n.net.plug(ctx, cmd.Process.Pid); err != nil {
			return fail(err)
		}
	}
	n.mu.Lock()
	n.cur, n.lastBoot = b, started
	n.mu.Unlock()
	return nil
}

// kill ends the current boot, if any, and checks that it left nothing.
func (n *Node) kill() error {
	n.mu.Lock()
	b := n.cur
	n.cur = nil
	n.mu.Unlock()
	if b == nil {
		return nil
	}
	_ = b.cmd.Process.Kill()
	return n.cleanupBoot(b)
}

// cleanupBoot waits for a killed boot's processes to go, removes its
// cgroup and checks that its loop device and mounts are released.
func (n *Node) cleanupBoot(b *boot) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if b.cmd != nil {
		select {
		case <-b.done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("pid %d did not exit", b.cmd.Process.Pid))
		}
	}
	if b.cgroup != "" {
		if err := killCgroup(ctx, b.cgroup); err != nil {
			errs = append(errs, err)
		}
	}
	if b.cgfd != nil {
		b.cgfd.Close()
	}
	if err := waitReleased(ctx, b.status.Loop, b.backing, n.MountedRoot()); err != nil {
		errs = append(errs, err)
	}
	if b.link != "" {
		if err := os.Remove(b.link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
