package testnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Config describes a node.
type Config struct {
	// Name is the node's hostname (set in its UTS namespace and passed to
	// its systemd as systemd.hostname=, the way a disk node gets it from
	// the kernel command line). Letters, digits and dashes.
	Name string
	// Image is the squashfs root image, mounted read-only as the root.
	Image string
	// State is the node's persistent state directory on the host. It
	// must contain var/ (see SeedState); it is bound at /state when the
	// image has that directory, and State/var is bound at /var.
	State string
	// Activate, when set, is run (argv, no shell) in the node's mount
	// namespace after the mounts and before systemd starts, with the
	// host's root directory and environment. "{root}" in an argument
	// stands for the mounted node root (Node.MountedRoot), for example
	// {"/path/to/strata", "activate", "--root", "{root}"}. A failure
	// aborts the start with an error that contains its output; the
	// output of the current boot is Node.ActivationOutput.
	Activate []string
	// Env is added to systemd's environment (container=other is always
	// set).
	Env []string
	// SystemdArgs follow "--system systemd.hostname=NAME" on systemd's
	// command line; systemd in a container reads them as its kernel
	// command line. Nil means DefaultSystemdArgs.
	SystemdArgs []string
	// Network gives the node an address on a private test subnet
	// (Node.Address), linked to the host by a veth pair; without it the
	// node has only loopback.
	Network bool
}

// DefaultSystemdArgs keep gettys off: the node shares the host's /dev, so
// getty@tty1 would take over the host's tty1, and its console is a log
// file.
var DefaultSystemdArgs = []string{"systemd.getty_auto=0", "systemd.mask=getty.target"}

// Node is a running test node: real systemd as PID 1 of its own PID,
// mount, UTS, IPC, network and cgroup namespaces, with the image as its
// read-only root.
type Node struct {
	t    testing.TB
	cfg  Config
	work string // host directory: root/, console.log, launcher.log, image links
	net  *link  // with Config.Network

	mu       sync.Mutex
	boots    int
	cur      *boot
	stopped  bool
	lastBoot time.Time
}

// WorkPrefix starts the name of every node's work directory in
// os.TempDir(): WorkPrefix, the test binary's PID, "-", the node's name,
// "-" and a random suffix. The loop devices of the node's image are set
// up from hard links in it, so `losetup -a` tells which nodes hold one.
const WorkPrefix = "strata-testnode-"

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Start boots a node and registers t.Cleanup to stop it and check that its
// mounts, loop device, cgroup and processes are gone (a leak fails t).
// The test binary's TestMain must call MaybeLaunch (or Main) first. Start
// does not wait for the node's services: call WaitRunning.
func Start(ctx context.Context, t testing.TB, cfg Config) (*Node, error) {
	if !launching {
		return nil, errors.New("testnode: starting a node: TestMain must call testnode.MaybeLaunch or testnode.Main")
	}
	if !validName.MatchString(cfg.Name) {
		return nil, fmt.Errorf("testnode: starting a node: invalid name %q", cfg.Name)
	}
	if fi, err := os.Stat(cfg.Image); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("testnode: starting node %s: image %s is not a regular file (%v)", cfg.Name, cfg.Image, err)
	}
	if fi, err := os.Stat(filepath.Join(cfg.State, "var")); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("testnode: starting node %s: state %s has no var directory (SeedState fills it): %v", cfg.Name, cfg.State, err)
	}
	sweepStale()
	var err error
	if cfg.Image, err = filepath.Abs(cfg.Image); err != nil {
		return nil, err
	}
	if cfg.State, err = filepath.Abs(cfg.State); err != nil {
		return nil, err
	}
	if cfg.SystemdArgs == nil {
		cfg.SystemdArgs = DefaultSystemdArgs
	}
	work, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", WorkPrefix, os.Getpid(), cfg.Name))
	if err != nil {
		return nil, fmt.Errorf("testnode: starting node %s: %w", cfg.Name, err)
	}
	if err := os.Mkdir(filepath.Join(work, "root"), 0o755); err != nil {
		return nil, fmt.Errorf("testnode: starting node %s: %w", cfg.Name, err)
	}
	n := &Node{t: t, cfg: cfg, work: work}
	if cfg.Network {
		if n.net, err = reserveSlot(); err != nil {
			return nil, fmt.Errorf("testnode: starting node %s: %w", cfg.Name, err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			n.logTails(t)
		}
		if err := n.Stop(); err != nil {
			t.Errorf("stopping node %s: %v", cfg.Name, err)
		}
	})
	if err := n.launch(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Name is the node's name (its hostname).
func (n *Node) Name() string { return n.cfg.Name }

// Config is the node's configuration, with absolute paths.
func (n *Node) Config() Config { return n.cfg }

// PID is the host PID of the node's systemd (PID 1 inside), or 0 when the
// node is stopped.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return 0
	}
	return n.cur.cmd.Process.Pid
}

// Root is a host path of the node's root directory as the node sees it,
// with all its mounts (/proc/PID/root): read the node's files through it.
// It changes with every boot.
func (n *Node) Root() string { return fmt.Sprintf("/proc/%d/root", n.PID()) }

// MountedRoot is where the launcher mounts the node root in the node's
// mount namespace (the path to pass to an activation command); from the
// host it is an empty directory.
func (n *Node) MountedRoot() string { return filepath.Join(n.work, "root") }

// LoopDevice is the loop device holding the image in the current boot.
func (n *Node) LoopDevice() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return ""
	}
	return n.cur.status.Loop
}

// StateMounted tells whether the state directory is bound at /state (only
// when the image has a /state directory to mount it on; /var is bound
// either way).
func (n *Node) StateMounted() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur != nil && n.cur.status.StateMounted
}

// ActivationOutput is the output of the activation command of the
// current boot.
func (n *Node) ActivationOutput() []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return nil
	}
	return n.cur.status.Activation
}

// ConsoleLog is the host file the node's /dev/console writes to.
func (n *Node) ConsoleLog() string { return filepath.Join(n.work, "console.log") }

// Cgroup is the host directory of the node's cgroup (its cgroup namespace
// root) in the current boot.
func (n *Node) Cgroup() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur == nil {
		return ""
	}
	return n.cur.cgroup
}

// Reboot kills the node's systemd, waits until the node is gone and
// starts it again with the same configuration and state; the activation
// command runs again.
func (n *Node) Reboot(ctx context.Context) error {
	n.mu.Lock()
	stopped := n.stopped
	n.mu.Unlock()
	if stopped {
		return fmt.Errorf("testnode: rebooting node %s: stopped", n.cfg.Name)
	}
	if err := n.kill(); err != nil {
		return fmt.Errorf("testnode: rebooting node %s: %w", n.cfg.Name, err)
	}
	return n.launch(ctx)
}

// Stop kills the node (SIGKILL to its PID 1, then its cgroup), checks
// that nothing of it is left and removes its work directory. It is safe
// to call more than once.
func (n *Node) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	n.mu.Unlock()
	err := n.kill()
	n.net.release()
	for _, f := range []string{"console.log", "launcher.log", "root", ""} {
		if rerr := os.Remove(filepath.Join(n.work, f)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("removing node work files: %w", rerr))
		}
	}
	if err != nil {
		return fmt.Errorf("testnode: stopping node %s: %w", n.cfg.Name, err)
	}
	return nil
}
