package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// The names the running binary is executed under for the sandbox's two
// helpers (os.Args[0]; no program is installed under them).
const (
	childArg0  = "strata-sandbox-init"
	holderArg0 = "strata-sandbox-userns"
)

func init() {
	if len(os.Args) != 1 {
		return
	}
	switch os.Args[0] {
	case childArg0:
		child()
	case holderArg0:
		// Hold the user namespace until the parent has opened it.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
}

// child is the sandbox's first process, in its new namespaces. It reads
// its configuration from fd 3, builds the root and drops every privilege
// on this thread, then executes the command in its place. Why setup
// failed is written to fd 4, which a successful exec closes unwritten.
func child() {
	runtime.LockOSThread()
	status := os.NewFile(4, "status")
	fail := func(err error) {
		fmt.Fprintf(status, "%v", err)
		os.Exit(125)
	}
	var cfg childConfig
	if err := json.NewDecoder(io.LimitReader(os.NewFile(3, "config"), 1<<20)).Decode(&cfg); err != nil {
		fail(fmt.Errorf("reading the configuration: %w", err))
	}
	unix.CloseOnExec(3)
	unix.CloseOnExec(4)
	if err := enter(cfg.Root); err != nil {
		fail(err)
	}
	if err := limit(cfg); err != nil {
		fail(err)
	}
	if err := unix.Chdir(cfg.Dir); err != nil {
		fail(fmt.Errorf("working directory %s: %w", cfg.Dir, err))
	}
	if err := dropPrivileges(); err != nil {
		fail(err)
	}
	if err := installSeccomp(); err != nil {
		fail(err)
	}
	err := syscall.Exec(cfg.Argv[0], cfg.Argv, cfg.Env)
	fail(fmt.Errorf("executing %s: %w", cfg.Argv[0], err))
}

// enter makes the view at root this namespace's root: a fresh /proc of
// the new PID namespace is mounted in it first (while the host's proc is
// still visible, as the kernel requires inside a user namespace), then
// pivot_root puts the view at / and the old root is detached whole.
func enter(root string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	// The view was mounted outside this user namespace, so the kernel
	// locks it in place (pivot_root refuses it): a bind of it made here
	// is this namespace's own.
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding the view: %w", err)
	}
	if err := unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := unix.Mount("devpts", root+"/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("entering %s: %w", root, err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root to %s: %w", root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	return unix.Sethostname([]byte("strata-sandbox"))
}

// limit sets the resource limits the command starts with.
func limit(cfg childConfig) error {
	for _, l := range []struct {
		name     string
		resource int
		value    uint64
	}{
		{"address space", unix.RLIMIT_AS, uint64(cfg.Memory)},
		{"file size", unix.RLIMIT_FSIZE, uint64(cfg.Files)},
		{"open files", unix.RLIMIT_NOFILE, 1024},
		{"processes", unix.RLIMIT_NPROC, 512},
		{"core size", unix.RLIMIT_CORE, 0},
		{"locked memory", unix.RLIMIT_MEMLOCK, 0},
	} {
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: l.value, Max: l.value}); err != nil {
			return fmt.Errorf("limiting %s: %w", l.name, err)
		}
	}
	return nil
}

// dropPrivileges leaves this thread (and so the command it executes)
// with no capability that exec could give back: securebits locked so
// that uid 0 gains none, the bounding and ambient sets empty, the
// capability sets cleared, and no_new_privs set.
func dropPrivileges() error {
	// SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS (off) and
	// SECBIT_NO_CAP_AMBIENT_RAISE, each with its lock
	// (linux/securebits.h).
	const bits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("setting securebits: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err == unix.EINVAL {
			break // past the last capability this kernel has
		}
		if err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return nil
}
