package testnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/sandbox"
)

// launcherEnv selects launcher mode in a re-executed test binary; its value
// is the JSON-encoded launchSpec.
const launcherEnv = "STRATA_TESTNODE_LAUNCHER"

// statusFD is the launcher's end of the status pipe (ExtraFiles[0]). It is
// close-on-exec: when systemd's exec succeeds the parent reads EOF.
const statusFD = 3

// systemdPath is the init the launcher executes inside the node root.
const systemdPath = "/lib/systemd/systemd"

// launchSpec is what the parent tells the launcher.
type launchSpec struct {
	Name     string   // hostname
	Image    string   // squashfs file (a per-boot hard link of Config.Image)
	Root     string   // empty directory: the node root R is mounted here
	State    string   // host state directory, bound at R/state
	Console  string   // regular file bound over R/dev/console
	Activate []string // optional argv run before systemd
	Env      []string // systemd's environment
	Args     []string // systemd's arguments after --system
}

// launchStatus is what the launcher tells the parent: one message before
// it executes systemd, or one with Err when it gives up.
type launchStatus struct {
	Loop         string `json:"loop,omitempty"`
	StateMounted bool   `json:"state_mounted"`
	Activation   []byte `json:"activation,omitempty"`
	Err          string `json:"err,omitempty"`
}

// launching records that MaybeLaunch ran in this process, so Start can
// refuse to re-execute a test binary that would not become a launcher.
var launching bool

// MaybeLaunch turns this process into a node launcher when it was started
// as one by Start, and never returns then; otherwise it returns at once.
// Call it first thing in TestMain of every package that starts nodes (Main
// does).
func MaybeLaunch() {
	launching = true
	v, ok := os.LookupEnv(launcherEnv)
	if !ok {
		return
	}
	status := os.NewFile(statusFD, "status")
	unix.CloseOnExec(statusFD)
	var spec launchSpec
	err := json.Unmarshal([]byte(v), &spec)
	if err == nil {
		err = launch(&spec, status)
	}
	_ = json.NewEncoder(status).Encode(launchStatus{Err: err.Error()})
	os.Exit(1)
}

// launch runs as PID 1 of the node's new PID, mount, UTS, IPC and network
// namespaces, inside the node's cgroup. It builds the node's mounts,
// runs the activation command and executes systemd; it returns only on
// failure.
func launch(s *launchSpec, status *os.File) error {
	// The cgroup namespace is per thread: unshare it on the thread that
	// will exec systemd, and run every helper command from it.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unsharing the cgroup namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := unix.Sethostname([]byte(s.Name)); err != nil {
		return fmt.Errorf("setting hostname %q: %w", s.Name, err)
	}
	if err := sandbox.LoopbackUp(); err != nil {
		return err
	}
	st, err := mountNode(s)
	if err != nil {
		return err
	}
	if len(s.Activate) > 0 {
		cmd := exec.Command(s.Activate[0], s.Activate[1:]...)
		cmd.Env = launcherFreeEnv()
		out, err := cmd.CombinedOutput()
		st.Activation = out
		if err != nil {
			return fmt.Errorf("activation %q: %w\n%s", s.Activate, err, out)
		}
	}
	if err := json.NewEncoder(status).Encode(st); err != nil {
		return fmt.Errorf("writing launcher status: %w", err)
	}
	// The node's root becomes its mount namespace's root (pivot_root,
	// as a booted machine's or systemd-nspawn's is), not a chroot: the
	// kernel refuses a chrooted process a user namespace, which
	// strata's sandbox for validation and check commands needs.
	if err := unix.Chdir(s.Root); err != nil {
		return fmt.Errorf("entering %s: %w", s.Root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root to %s: %w", s.Root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root from node %s: %w", s.Name, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir / in %s: %w", s.Root, err)
	}
	argv := append([]string{systemdPath, "--system"}, s.Args...)
	err = unix.Exec(systemdPath, argv, append([]string{"container=other"}, s.Env...))
	return fmt.Errorf("executing %s in %s: %w", systemdPath, s.Root, err)
}

// mountNode builds the node root at s.Root the way a disk node's
// initramfs does (squashfs read-only, state at /state, /var from
// state/var, tmpfs /run and /tmp) plus what a container needs (proc with
// a read-only /proc/sys, /sys with the node's own cgroup2 tree, /dev with
// a console that is a log file).
func mountNode(s *launchSpec) (*launchStatus, error) {
	r := s.Root
	loop, err := mountImage(s.Image, r)
	if err != nil {
		return nil, err
	}
	st := &launchStatus{Loop: loop}
	if fi, err := os.Stat(filepath.Join(r, "state")); err == nil && fi.IsDir() {
		if err := bind(s.State, filepath.Join(r, "state"), 0); err != nil {
			return nil, err
		}
		st.StateMounted = true
	}
	steps := []func() error{
		func() error { return bind(filepath.Join(s.State, "var"), filepath.Join(r, "var"), 0) },
		func() error { return mnt("tmpfs", r, "run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755") },
		func() error { return mnt("tmpfs", r, "tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777") },
		func() error { return mnt("proc", r, "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "") },
		// The node must not change the host's kernel settings.
		func() error { return bind(filepath.Join(r, "proc/sys"), filepath.Join(r, "proc/sys"), unix.MS_RDONLY) },
		func() error { return bind("/sys", filepath.Join(r, "sys"), unix.MS_REC) },
		// The host's cgroup mounts go; the node gets a cgroup2 mount whose
		// root is its own cgroup (the namespace root), so its systemd
		// manages that subtree only.
		func() error {
			p := filepath.Join(r, "sys/fs/cgroup")
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmounting %s: %w", p, err)
			}
			return mnt("cgroup2", r, "sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		},
		func() error { return bind("/dev", filepath.Join(r, "dev"), unix.MS_REC) },
		func() error { return bind(s.Console, filepath.Join(r, "dev/console"), 0) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// mnt mounts a filesystem of type fstype on root/dir.
func mnt(src, root, dir, fstype string, flags uintptr, data string) error {
	p := filepath.Join(root, dir)
	if err := unix.Mount(src, p, fstype, flags, data); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", fstype, p, err)
	}
	return nil
}

// bind bind-mounts src on dst (recursively with MS_REC); MS_RDONLY makes
// the top mount read-only.
func bind(src, dst string, flags uintptr) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|(flags&unix.MS_REC), ""); err != nil {
		return fmt.Errorf("binding %s on %s: %w", src, dst, err)
	}
	if flags&unix.MS_RDONLY != 0 {
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", dst, err)
		}
	}
	return nil
}

// launcherFreeEnv is this process's environment without the launcher's
// own variable, for the activation command.
func launcherFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, launcherEnv+"=") {
			env = append(env, kv)
		}
	}
	return env
}
