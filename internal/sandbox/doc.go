// Package sandbox runs a command that came from a repository (a service's
// validate or check command), or a recipe's build step, without
// privileges on the host.
//
// The command runs as the first process of fresh user, mount, PID, IPC,
// UTS and cgroup namespaces, and of a network namespace with nothing in
// it unless the caller asks for the host's network (health checks probe
// the service they check). The user namespace maps ids 0-65535 to the
// unprivileged host ids HostIDBase to HostIDBase+65535, so "root" inside
// is an unprivileged user outside. Its root is a view of a directory
// tree: every mount of the tree, cloned with the same id mapping where the
// file system allows it (so owners inside are the tree's own) and topped
// with a copy-on-write overlay whose writes land on a bounded tmpfs and
// vanish with the sandbox. The view gets a small /dev of its own (null,
// zero, full, random, urandom, tty), fresh tmpfs on /tmp, /run and
// /dev/shm, and a fresh /proc of its PID namespace, entered with
// pivot_root: the old root is detached, so no host mount is reachable.
// Before the command is executed every capability is dropped (bounding,
// ambient, effective, permitted and inheritable sets, with securebits
// locked so that uid 0 gains none at exec), no_new_privs is set, and a
// seccomp filter refuses the calls that reach kernel surfaces a
// validation has no need of (mount, namespaces, keyrings, BPF, ptrace,
// io_uring, module loading and more). Time, address space, file size,
// open files and processes are bounded, memory and processes also for all
// of the command's processes together in a control group of their own
// (where the host lets strata make one), and output is kept to a limit.
//
// A build step (Spec.Writable, Spec.RootCaps) gets the tree itself bound
// writable through the id mapping instead of the copy-on-write view, and
// keeps root's capabilities inside its user namespace, where they reach
// only the tree and the sandbox's own namespaces.
//
// The sandbox's setup runs in a re-execution of the running binary
// (/proc/self/exe), recognised by this package's init function before
// main runs, so a program that imports the package needs nothing else.
package sandbox
