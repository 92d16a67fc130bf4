package sandbox

import "golang.org/x/sys/unix"

// auditArch is this architecture's AUDIT_ARCH value in seccomp_data.
const auditArch = unix.AUDIT_ARCH_AARCH64

// x32Bit: arm64 has no second ABI to refuse.
const x32Bit = 0

// archDenied are denied calls only this architecture has.
var archDenied = []uintptr{}
