// Package testnode runs live test nodes on this machine: each boots from
// a strata squashfs image the way a provisioned disk node does, with real
// systemd as PID 1, so tests can apply overlays on running nodes and see
// which units were restarted.
//
// # A node
//
// Start re-executes the test binary as a launcher (TestMain must call
// MaybeLaunch, or be testnode.Main) in new PID, mount, UTS, IPC and
// network namespaces, born into a fresh cgroup2 cgroup of its own
// (CLONE_INTO_CGROUP) and with Pdeathsig SIGKILL, so it dies with the test
// binary. The launcher is PID 1 of its PID namespace. It unshares a cgroup
// namespace, makes every mount private and builds the node root R (an
// empty directory on the host, Node.MountedRoot):
//
//   - the image on a fresh read-only loop device with autoclear, squashfs
//     mounted read-only on R;
//   - the state directory bound on R/state when the image has /state, and
//     STATE/var bound on R/var (SeedState fills STATE/var from the image);
//   - tmpfs on R/run and R/tmp, a new proc on R/proc with /proc/sys
//     read-only (the node must not change the host's sysctls), /sys
//     bound recursively with a new cgroup2 mount on R/sys/fs/cgroup
//     (rooted at the node's cgroup, so its systemd manages only its own
//     subtree), /dev bound recursively with a log file over R/dev/console
//     (Node.ConsoleLog);
//   - hostname set to the node's name, lo up in its network namespace (so
//     every node can run nginx on port 80 of its own loopback).
//
// Then it runs the optional activation argv (Config.Activate; "{root}"
// stands for R), makes R its root with pivot_root (detaching the host's
// root; not chroot, which would bar user namespaces inside) and executes
// /lib/systemd/systemd --system systemd.hostname=NAME with
// container=other. Systemd in a
// container reads its arguments as its kernel command line;
// DefaultSystemdArgs keep gettys off the host's terminals.
//
// The launcher reports over a close-on-exec pipe, so Start returns as
// soon as systemd has been executed, with the activation's output or its
// error. WaitRunning waits for `systemctl is-system-running --wait`.
//
// # Stopping
//
// Killing PID 1 makes the kernel kill the rest of the PID namespace and
// drop the node's mount namespace with its mounts; the loop device
// detaches itself. Stop and Reboot SIGKILL PID 1, kill what is left in
// the node's cgroup (cgroup.kill: commands started with Exec live there
// too), remove the cgroup and check that the loop device is released and
// no mount is visible on the host. Start registers a t.Cleanup that does
// the same and fails the test on a leak. Each boot sets up its loop device
// from a hard link of the image in the node's work directory, so `losetup
// -a` tells which node holds which device. When a test binary is killed
// outright, its nodes still die with it; the next Start removes the work
// directories and cgroups it left.
//
// # Looking inside
//
// Exec runs an argv in all of the node's namespaces with nsenter. Unit and
// Units read `systemctl show`; Changes and Changed compare two snapshots
// of Units to tell which services were started, restarted or stopped in
// between (a reload changes nothing). Root is /proc/PID/root, the node's
// file tree as the node sees it.
//
// # Requirements
//
// Root, Linux with cgroup2 mounted (alone or beside v1 hierarchies) and
// cgroup.kill, nsenter (util-linux), unsquashfs (squashfs-tools) for
// SeedState. DebianImage builds images/debian-node with the builder
// library and the cache $STRATA_TEST_CACHE (default
// /var/cache/strata-test), once per test binary. The package's own tests
// need that image and so the debian build tag:
//
//	go test -tags debian -count=1 -run . -v ./tests/testnode/
package testnode
