package sandbox

import "golang.org/x/sys/unix"

// auditArch is this architecture's AUDIT_ARCH value in seccomp_data.
const auditArch = unix.AUDIT_ARCH_X86_64

// x32Bit marks x32 ABI system call numbers on x86-64.
const x32Bit = 0x40000000

// archDenied are denied calls only this architecture has.
var archDenied = []uintptr{unix.SYS_USELIB}
