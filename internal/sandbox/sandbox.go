package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// HostIDBase is the first host uid and gid of the sandbox's mapping:
// ids 0-65535 inside are HostIDBase to HostIDBase+65535 outside. The
// range is the last 64 Ki block of systemd's range for container ids
// (524288-1879048191), which no login user has.
const HostIDBase = 0x6fff0000

// mapSize is how many ids the sandbox maps.
const mapSize = 65536

// Defaults for a Spec's zero fields.
const (
	DefaultTimeout = time.Minute
	DefaultMemory  = 4 << 30   // address space of each process
	DefaultScratch = 256 << 20 // the tmpfs that takes the view's writes
	DefaultOutput  = 64 << 10
	DefaultProcs   = 64
)

// ErrSandbox reports that the sandbox itself could not be set up (as
// opposed to a command that ran and failed).
var ErrSandbox = errors.New("the sandbox cannot be set up")

// ErrTimeout reports a command stopped at its time limit.
var ErrTimeout = errors.New("the sandbox's time limit reached")

// ErrMemory reports a command the kernel stopped at its memory limit.
var ErrMemory = errors.New("the sandbox's memory limit reached")

// Spec is one command to run in a sandbox.
type Spec struct {
	// Root is the host directory whose tree becomes the command's "/".
	Root string
	// Argv is the command: an absolute program path inside Root and its
	// arguments. It is executed directly, never through a shell.
	Argv []string
	// Env is the command's whole environment (default: a PATH and LANG=C).
	Env []string
	// Dir is the working directory inside the sandbox (default "/").
	Dir string
	// Network keeps the host's network namespace (a health check that
	// connects to its service); otherwise the command has a namespace of
	// its own with only lo, up, where any port may be bound (nginx -t
	// binds its listening sockets) and nothing outside can be reached.
	Network bool
	// Timeout bounds the run (default DefaultTimeout).
	Timeout time.Duration
	// Memory bounds each process's address space and, where the host
	// lets strata make a control group, the memory of all the command's
	// processes together, swap and what the kernel charges for files in
	// memory (tmpfs, memfds, pipes) included (default DefaultMemory).
	Memory int64
	// Scratch bounds what the command may write, in bytes, all of it
	// discarded at the end (default DefaultScratch).
	Scratch int64
	// Output is how much combined output is kept (default DefaultOutput).
	Output int
	// FileCaps keeps, of all capabilities, the five that override file
	// owners and permissions (CAP_CHOWN, CAP_DAC_OVERRIDE,
	// CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID), as the root a
	// validation command expects to be (nginx -t appends to a log file
	// www-data owns). In the user namespace they reach only files whose
	// owner it maps: the view's copy-on-write copies of the tree. Without
	// it every capability is dropped.
	FileCaps bool
	// RootCaps keeps every capability of root in the sandbox's user
	// namespace except the few no build needs (modules, raw I/O, clocks,
	// reboot, mknod, syslog, MAC administration), without securebits, so
	// uid 0 behaves as root: a build step that installs packages (dpkg
	// sets owners, apt switches to its own user) works. They reach only
	// what the namespace owns or maps: the tree (when Writable) and the
	// sandbox's own namespaces. It takes precedence over FileCaps.
	RootCaps bool
	// Writable binds Root itself read-write, with the sandbox's id
	// mapping (its file system must allow that), instead of a
	// copy-on-write view: what the command writes stays in the tree, its
	// root's files owned by uid 0 on disk. Nothing may be mounted below
	// Root. Scratch then bounds only /tmp, /run and /dev/shm.
	Writable bool
	// Procs bounds the processes of the command (its control group's
	// pids.max) and of the sandbox's user (RLIMIT_NPROC, counted per
	// host user, so concurrent sandboxes share it) (default
	// DefaultProcs).
	Procs int
	// FileSize bounds the size of each file the command writes (default
	// Scratch).
	FileSize int64
	// Stream, when set, receives the command's standard output and error
	// as they come instead of being kept: Run then returns no output.
	Stream io.Writer
}

// Run runs spec's command in a sandbox and returns its combined output
// (standard output and error, at most spec.Output bytes, trimmed). A
// command that exits non-zero returns its output and an error wrapping
// *exec.ExitError; one stopped at its time limit wraps ErrTimeout; a
// sandbox that could not be set up wraps ErrSandbox.
func Run(ctx context.Context, spec Spec) (string, error) {
	return Private(func() (string, error) { return RunHere(ctx, spec) })
}

// Private calls fn on a thread of its own in a new private mount
// namespace (every mount made there is invisible outside and goes with
// the thread), for a caller that prepares the tree before RunHere (stacks
// a staged change at its paths, say).
func Private(fn func() (string, error)) (string, error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The namespace belongs to this thread alone, which is never
		// unlocked: it ends with the goroutine, and the namespace and
		// every mount made in it with it.
		runtime.LockOSThread()
		// The thread goes back to the process's mount namespace after
		// fn (the private one, and every mount in it, then goes): a
		// locked main thread is parked rather than ended, and
		// /proc/self/mountinfo is the main thread's.
		orig, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{"", fmt.Errorf("%w: private mount namespace: %w", ErrSandbox, err)}
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- result{"", fmt.Errorf("%w: private mount namespace: %w", ErrSandbox, err)}
			return
		}
		defer func() { _ = unix.Setns(orig, unix.CLONE_NEWNS) }()
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- result{"", fmt.Errorf("%w: making mounts private: %w", ErrSandbox, err)}
			return
		}
		out, err := fn()
		done <- result{out, err}
	}()
	r := <-done
	return r.out, r.err
}

// RunHere is Run for a caller already in a private mount namespace on its
// locked thread (see Private). It must be called on that thread. The mounts it makes
// stay in the namespace until the thread ends.
func RunHere(ctx context.Context, spec Spec) (string, error) {
	spec = withDefaults(spec)
	if err := checkSpec(spec); err != nil {
		return "", err
	}
	userns, err := idmapNS()
	if err != nil {
		return "", err
	}
	v, err := buildView(spec.Root, userns, spec.Scratch, spec.Writable)
	if err != nil {
		return "", err
	}
	defer v.close()
	return start(ctx, spec, v)
}

func withDefaults(s Spec) Spec {
	if s.Env == nil {
		s.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	}
	if s.Dir == "" {
		s.Dir = "/"
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.Memory <= 0 {
		s.Memory = DefaultMemory
	}
	if s.Scratch <= 0 {
		s.Scratch = DefaultScratch
	}
	if s.Output <= 0 {
		s.Output = DefaultOutput
	}
	if s.Procs <= 0 {
		s.Procs = DefaultProcs
	}
	if s.FileSize <= 0 {
		s.FileSize = s.Scratch
	}
	return s
}

func checkSpec(s Spec) error {
	if len(s.Argv) == 0 || !filepath.IsAbs(s.Argv[0]) {
		return fmt.Errorf("%q is not an absolute program path", s.Argv)
	}
	// /proc/self/exe and its kind would run a program from outside the
	// view (the host's strata binary).
	for _, d := range []string{"/proc", "/dev", "/sys"} {
		if p := filepath.Clean(s.Argv[0]); p == d || strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("%s is not a program of the tree (below %s)", s.Argv[0], d)
		}
	}
	if !filepath.IsAbs(s.Root) {
		return fmt.Errorf("root %q is not an absolute path", s.Root)
	}
	if !filepath.IsAbs(s.Dir) {
		return fmt.Errorf("working directory %q is not an absolute path", s.Dir)
	}
	return nil
}

// childConfig is what the re-executed child needs: where the view is and
// what to execute there.
type childConfig struct {
	View   string   `json:"view"`
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	Memory int64    `json:"memory"`
	Files  int64    `json:"files"`
	Caps   bool     `json:"caps"`
	Root   bool     `json:"root_caps"`
	Procs  int      `json:"procs"`
	OwnNet bool     `json:"own_net"`
	CPU    int64    `json:"cpu"` // seconds
}

// start runs the child in the view and waits for it.
func start(ctx context.Context, spec Spec, v *view) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer cfgR.Close()
	defer cfgW.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer stR.Close()
	defer stW.Close()
	procP, procC, err := procPair()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer procP.Close()
	defer procC.Close()

	var out bytes.Buffer
	w := &capped{b: &out, n: spec.Output}
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{childArg0}
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = w, w
	if spec.Stream != nil {
		cmd.Stdout, cmd.Stderr = spec.Stream, spec.Stream
	}
	cmd.ExtraFiles = []*os.File{cfgR, stW, procC} // fds 3, 4 and 5
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP)
	if !spec.Network {
		flags |= unix.CLONE_NEWNET
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 flags,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: HostIDBase, Size: mapSize}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: HostIDBase, Size: mapSize}},
		GidMappingsEnableSetgroups: true,
		// No supplementary group of the caller's comes along.
		Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
	}
	cmd.WaitDelay = 2 * time.Second
	cg, err := newCgroup(spec.Memory, spec.Procs)
	if err != nil {
		return "", err
	}
	defer cg.close()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%w: starting %s again as the sandbox's first process: %w%s", ErrSandbox, os.Args[0], err, userNSHint(err))
	}
	// Into the control group before it reads its configuration, so
	// before anything of the command runs.
	if err := cg.add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", err
	}
	cfgR.Close()
	stW.Close()
	procC.Close()
	cfg := childConfig{View: v.root, Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir, Memory: spec.Memory, Files: spec.FileSize, Caps: spec.FileCaps, Root: spec.RootCaps, Procs: spec.Procs, OwnNet: !spec.Network, CPU: int64(spec.Timeout/time.Second) + 1}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", fmt.Errorf("%w: handing over the command: %w", ErrSandbox, err)
	}
	cfgW.Close()
	if err := serveProc(ctx, procP); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	// The child writes why it failed before the command ran to fd 4;
	// a successful exec closes it empty.
	setup, _ := io.ReadAll(io.LimitReader(stR, 4096))
	err = cmd.Wait()
	text := strings.TrimSpace(out.String())
	switch {
	case len(setup) > 0:
		return text, fmt.Errorf("%w: %s", ErrSandbox, strings.TrimSpace(string(setup)))
	case err != nil && cg.oomKilled():
		return text, fmt.Errorf("%s: %w (%d MiB for all its processes)", spec.Argv[0], ErrMemory, spec.Memory>>20)
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		return text, fmt.Errorf("%s: %w (stopped after %s)", spec.Argv[0], ErrTimeout, spec.Timeout)
	case err != nil && ctx.Err() != nil:
		return text, fmt.Errorf("%s: %w", spec.Argv[0], ctx.Err())
	case err != nil:
		return text, fmt.Errorf("%s: %w", spec.Argv[0], err)
	}
	return text, nil
}

// capped keeps the first n bytes written to it.
type capped struct {
	b *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
