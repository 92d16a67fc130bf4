package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// denied are the system calls the sandbox refuses with EPERM: mounting
// and namespaces (a nested user namespace is the usual first step of a
// kernel exploit), keyrings, BPF, ptrace and cross-process memory,
// io_uring, userfaultfd, handles that bypass path checks, module and
// kexec loading, clocks, swap, reboot, accounting and quotas. Without
// capabilities most would fail anyway; the filter keeps the kernel code
// behind them out of reach.
var denied = []uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_USERFAULTFD,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT, unix.SYS_ACCT, unix.SYS_QUOTACTL,
	unix.SYS_SYSLOG, unix.SYS_VHANGUP,
	unix.SYS_KCMP, unix.SYS_FANOTIFY_INIT, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_QUOTACTL_FD, unix.SYS_OPEN_TREE_ATTR,
}

// socketFamilies are the address families socket and socketpair may
// make; others (AF_VSOCK reaches the hypervisor whatever the network
// namespace) fail with EAFNOSUPPORT.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// namespaceFlags are the clone flags that make new namespaces.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on a little-endian machine
)

// BPF opcodes and seccomp return values.
const (
	bpfLdAbs  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeq    = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJge    = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfJset   = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfRet    = unix.BPF_RET | unix.BPF_K
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retErrno  = unix.SECCOMP_RET_ERRNO
	retEPERM  = retErrno | uint32(unix.EPERM)
	retENOSYS = retErrno | uint32(unix.ENOSYS)

	retEAFNOSUPPORT = retErrno | uint32(unix.EAFNOSUPPORT)
)

// filter returns the sandbox's seccomp program: another architecture's
// calls (and, on x86-64, the x32 ABI) kill the process; denied calls and
// clone with a namespace flag fail with EPERM; clone3, whose flags a
// filter cannot read, fails with ENOSYS, so C libraries fall back to
// clone; everything else is allowed.
func filter() []unix.SockFilter {
	type ins struct {
		code   uint16
		k      uint32
		jt, jf string // labels; "" is the next instruction
	}
	p := []ins{
		{code: bpfLdAbs, k: offArch},
		{code: bpfJeq, k: auditArch, jf: "kill"},
		{code: bpfLdAbs, k: offNr},
	}
	if x32Bit != 0 {
		p = append(p, ins{code: bpfJge, k: x32Bit, jt: "kill"})
	}
	for _, nr := range append(denied, archDenied...) {
		p = append(p, ins{code: bpfJeq, k: uint32(nr), jt: "eperm"})
	}
	// socket and socketpair: the family is the first argument.
	p = append(p,
		ins{code: bpfJeq, k: uint32(unix.SYS_SOCKET), jt: "family"},
		ins{code: bpfJeq, k: uint32(unix.SYS_SOCKETPAIR), jt: "family"},
	)
	p = append(p,
		ins{code: bpfJeq, k: uint32(unix.SYS_CLONE3), jt: "enosys"},
		ins{code: bpfJeq, k: uint32(unix.SYS_CLONE), jf: "allow"},
		ins{code: bpfLdAbs, k: offArg0},
		ins{code: bpfJset, k: namespaceFlags, jt: "eperm", jf: "allow"},
	)
	// The family check: allowed families jump to allow, the rest fail.
	family := len(p)
	p = append(p, ins{code: bpfLdAbs, k: offArg0})
	for _, f := range socketFamilies {
		p = append(p, ins{code: bpfJeq, k: f, jt: "allow"})
	}
	p = append(p, ins{code: bpfRet, k: retEAFNOSUPPORT})
	labels := map[string]ins{
		"allow":  {code: bpfRet, k: retAllow},
		"eperm":  {code: bpfRet, k: retEPERM},
		"enosys": {code: bpfRet, k: retENOSYS},
		"kill":   {code: bpfRet, k: retKill},
	}
	order := []string{"allow", "eperm", "enosys", "kill"}
	at := map[string]int{"family": family}
	for i, l := range order {
		at[l] = len(p) + i
	}
	jump := func(from int, label string) uint8 {
		if label == "" {
			return 0
		}
		return uint8(at[label] - from - 1)
	}
	var out []unix.SockFilter
	for i, in := range p {
		out = append(out, unix.SockFilter{Code: in.code, K: in.k, Jt: jump(i, in.jt), Jf: jump(i, in.jf)})
	}
	for _, l := range order {
		out = append(out, unix.SockFilter{Code: labels[l].code, K: labels[l].k})
	}
	return out
}

// installSeccomp loads the filter f (see filter) on this thread
// (no_new_privs must be set); the command executed from it inherits it.
func installSeccomp(f []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("installing the seccomp filter: %w", err)
	}
	return nil
}
