package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"

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
	// Only ever the first process of the user namespace Run made: a
	// strata started under this name in the host's namespaces (whose
	// uid_map is the identity) stops before touching any mount.
	if m, err := os.ReadFile("/proc/self/uid_map"); err != nil || len(m) == 0 || string(m[:min(len(m), 64)]) == identityMap(m) {
		fail(fmt.Errorf("%s runs only as the sandbox's first process", childArg0))
	}
	var cfg childConfig
	if err := json.NewDecoder(io.LimitReader(os.NewFile(3, "config"), 1<<20)).Decode(&cfg); err != nil {
		fail(fmt.Errorf("reading the configuration: %w", err))
	}
	unix.CloseOnExec(3)
	unix.CloseOnExec(4)
	unix.CloseOnExec(procFD)
	if err := enter(cfg.View); err != nil {
		fail(err)
	}
	if cfg.OwnNet {
		if err := ownNetwork(); err != nil {
			fail(err)
		}
	}
	if err := unix.Chdir(cfg.Dir); err != nil {
		fail(fmt.Errorf("working directory %s: %w", cfg.Dir, err))
	}
	// Everything this process allocates is allocated before the limits:
	// the address-space limit is the command's, and this Go process may
	// need more than a small command does.
	prog := filter()
	argv0, err := syscall.BytePtrFromString(cfg.Argv[0])
	if err != nil {
		fail(fmt.Errorf("executing %q: %w", cfg.Argv[0], err))
	}
	argv, err := syscall.SlicePtrFromStrings(cfg.Argv)
	if err != nil {
		fail(fmt.Errorf("executing %q: %w", cfg.Argv[0], err))
	}
	envv, err := syscall.SlicePtrFromStrings(cfg.Env)
	if err != nil {
		fail(fmt.Errorf("executing %q: %w", cfg.Argv[0], err))
	}
	limits := limitsOf(cfg)
	// Only standard input, output and error reach the command: every
	// other descriptor this process has (its own, and any that whoever
	// started strata left open without close-on-exec) closes at exec.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fail(fmt.Errorf("closing inherited descriptors: %w", err))
	}
	drop := dropPrivileges
	if cfg.Root {
		drop = keepRoot
	}
	if err := drop(cfg.Caps); err != nil {
		fail(err)
	}
	if err := installSeccomp(prog); err != nil {
		fail(err)
	}
	for _, l := range limits {
		if err := unix.Setrlimit(l.resource, &unix.Rlimit{Cur: l.value, Max: l.value}); err != nil {
			fail(fmt.Errorf("limiting %s: %w", l.name, err))
		}
	}
	// execve itself, with no allocation between the limits and it.
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	fail(fmt.Errorf("executing %s: %w", cfg.Argv[0], errno))
}

// enter makes the view at root this namespace's root: a fresh /proc of
// the new PID namespace is mounted in it first (see mountProc), then
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
	if err := mountProc(root + "/proc"); err != nil {
		return err
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

// rlimit is one resource limit the command starts with.
type rlimit struct {
	name     string
	resource int
	value    uint64
}

// limitsOf returns the resource limits the command starts with.
func limitsOf(cfg childConfig) []rlimit {
	return []rlimit{
		{"address space", unix.RLIMIT_AS, uint64(cfg.Memory)},
		{"file size", unix.RLIMIT_FSIZE, uint64(cfg.Files)},
		{"open files", unix.RLIMIT_NOFILE, 1024},
		{"processes", unix.RLIMIT_NPROC, uint64(cfg.Procs)},
		{"CPU time", unix.RLIMIT_CPU, uint64(cfg.CPU)},
		{"core size", unix.RLIMIT_CORE, 0},
		{"locked memory", unix.RLIMIT_MEMLOCK, 0},
	}
}

// fileCaps are the capabilities Spec.FileCaps keeps: CAP_CHOWN,
// CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and CAP_FSETID.
var fileCaps = []uintptr{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER, unix.CAP_FSETID}

// dropPrivileges leaves this thread (and so the command it executes)
// with no capability that exec could give back, except the file ones
// when keep is set, passed on as ambient capabilities: securebits locked
// so that uid 0 gains nothing by being uid 0, the bounding set emptied
// of the rest, the capability sets cleared (or set to the kept ones), no
// ambient capability raised after, and no_new_privs set.
func dropPrivileges(keep bool) error {
	// SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP and SECBIT_KEEP_CAPS (off),
	// each with its lock (linux/securebits.h); SECBIT_NO_CAP_AMBIENT_RAISE
	// and its lock once the kept capabilities are raised.
	const bits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5
	const noAmbientRaise = 1<<6 | 1<<7
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
		return fmt.Errorf("setting securebits: %w", err)
	}
	kept := map[uintptr]bool{}
	if keep {
		for _, c := range fileCaps {
			kept[c] = true
		}
	}
	for c := uintptr(0); ; c++ {
		if kept[c] {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0)
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
	// Raise the kept ones as ambient while CAP_SETPCAP still allows
	// locking that, then lock it and clear every other capability.
	if err := capset(kept, true); err != nil {
		return err
	}
	for c := range kept {
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, c, 0, 0); err != nil {
			return fmt.Errorf("keeping capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits|noAmbientRaise, 0, 0, 0); err != nil {
		return fmt.Errorf("locking ambient capabilities: %w", err)
	}
	if err := capset(kept, false); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return nil
}

// rootDropped are the capabilities Spec.RootCaps still drops from the
// bounding set: none a build needs, and some act beyond the namespace.
var rootDropped = []uintptr{
	unix.CAP_SYS_MODULE, unix.CAP_SYS_BOOT, unix.CAP_SYS_TIME, unix.CAP_SYS_RAWIO,
	unix.CAP_MKNOD, unix.CAP_SYSLOG, unix.CAP_MAC_ADMIN, unix.CAP_MAC_OVERRIDE,
	unix.CAP_WAKE_ALARM, unix.CAP_BLOCK_SUSPEND, unix.CAP_AUDIT_CONTROL, unix.CAP_AUDIT_WRITE,
}

// keepRoot leaves uid 0 its capabilities in the user namespace (see
// Spec.RootCaps), less rootDropped, with no ambient capability and
// no_new_privs set. The unused argument matches dropPrivileges.
func keepRoot(bool) error {
	for _, c := range rootDropped {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	return nil
}

// capset sets this thread's effective, permitted and inheritable sets to
// caps, with CAP_SETPCAP added to the effective and permitted ones when
// setpcap is set.
func capset(caps map[uintptr]bool, setpcap bool) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for c := range caps {
		data[c/32].Effective |= 1 << (c % 32)
		data[c/32].Permitted |= 1 << (c % 32)
		data[c/32].Inheritable |= 1 << (c % 32)
	}
	if setpcap {
		data[0].Effective |= 1 << unix.CAP_SETPCAP
		data[0].Permitted |= 1 << unix.CAP_SETPCAP
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("setting capabilities: %w", err)
	}
	return nil
}

// identityMap returns m when it is the initial user namespace's uid_map
// (every id mapped to itself), else "".
func identityMap(m []byte) string {
	var in, out, n uint64
	if k, _ := fmt.Sscan(string(m), &in, &out, &n); k == 3 && in == 0 && out == 0 && n == 4294967295 {
		return string(m[:min(len(m), 64)])
	}
	return ""
}
