package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// chrootScript runs on the host as the first process of fresh PID, UTS,
// IPC and mount namespaces (see isolated). It sets a fixed hostname, mounts
// proc (with /proc/sys and /proc/sysrq-trigger read-only), a read-only
// sysfs, a small /dev of its own (null, zero, full, random, urandom, tty, a
// private devpts) and tmpfs on run and tmp inside the tree, then runs the
// command under chroot with a reduced capability bounding set (no module
// loading, reboot, clock setting, raw I/O, mknod, syslog or MAC admin),
// as PID 2 so package scripts see a chroot. The host's /dev is never bound
// in; every mount vanishes with the namespace, failure or not. Run steps
// are still root in the host's network namespace: recipe commands are
// trusted code, like a Dockerfile's RUN.
const chrootScript = `set -eu
root=$1
echo strata-build > /proc/sys/kernel/hostname
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount --bind -o ro "$root/proc/sys" "$root/proc/sys"
mount -o remount,bind,ro "$root/proc/sys"
if [ -e "$root/proc/sysrq-trigger" ]; then
	mount --bind -o ro "$root/proc/sysrq-trigger" "$root/proc/sysrq-trigger"
	mount -o remount,bind,ro "$root/proc/sysrq-trigger"
fi
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -t tmpfs -o nosuid,mode=0755 tmpfs "$root/dev"
mknod -m 666 "$root/dev/null" c 1 3
mknod -m 666 "$root/dev/zero" c 1 5
mknod -m 666 "$root/dev/full" c 1 7
mknod -m 666 "$root/dev/random" c 1 8
mknod -m 666 "$root/dev/urandom" c 1 9
mknod -m 666 "$root/dev/tty" c 5 0
mkdir -m 755 "$root/dev/pts"
mkdir -m 1777 "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts" || true
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
if [ -d "$root/run" ] && [ ! -L "$root/run" ]; then mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs "$root/run"; fi
if [ -d "$root/tmp" ] && [ ! -L "$root/tmp" ]; then mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$root/tmp"; fi
setpriv --bounding-set -sys_module,-sys_boot,-sys_time,-sys_rawio,-mknod,-syslog,-mac_admin,-mac_override,-wake_alarm,-block_suspend \
	chroot "$root" /bin/sh -c "$2"
`

// policyRcD keeps Debian's maintainer scripts from starting services
// while packages install in the tree.
const policyRcD = "#!/bin/sh\n# strata: no service starts while an image is built\nexit 101\n"

// runInTree runs the shell command cmd inside the tree at root with chroot,
// passing each line of output to line. During the command,
// /usr/sbin/policy-rc.d exits 101 (unless the tree has its own) and
// /etc/resolv.conf is the host's, so package installs reach the network;
// both are put back afterwards.
func runInTree(ctx context.Context, root, cmd string, line func(string)) error {
	for _, d := range []string{"dev", "proc", "sys"} {
		if err := ensureDir(filepath.Join(root, d)); err != nil {
			return err
		}
	}
	restore, err := prepareTree(root)
	if err != nil {
		return err
	}
	runErr := runLines(isolated(ctx, "/bin/sh", "-c", chrootScript, "strata-run", root, cmd), line)
	if err := restore(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// ensureDir makes p a directory (0755) if it is missing; anything else
// there (a symlink, a file) is refused, since mounts would follow it.
func ensureDir(p string) error {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("preparing tree: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("preparing tree: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("preparing tree: %s must be a directory to run a command in the tree", p)
	}
	return nil
}

// prepareTree installs policy-rc.d and the host's resolv.conf in the tree
// and returns how to undo both.
func prepareTree(root string) (func() error, error) {
	var undo []func() error
	restore := func() error {
		var first error
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if _, err := os.Lstat(policy); os.IsNotExist(err) && realDir(root, "usr/sbin") {
		if err := os.WriteFile(policy, []byte(policyRcD), 0o755); err != nil {
			return nil, fmt.Errorf("preparing tree: %w", err)
		}
		undo = append(undo, func() error { return os.Remove(policy) })
	}
	host, err := os.ReadFile("/etc/resolv.conf")
	resolv := filepath.Join(root, "etc/resolv.conf")
	fi, lerr := os.Lstat(resolv)
	switch {
	case err != nil || !realDir(root, "etc"):
		// No host resolver configuration, or no /etc: leave it.
	case os.IsNotExist(lerr):
		if err := os.WriteFile(resolv, host, 0o644); err != nil {
			return nil, fmt.Errorf("preparing tree: %w", err)
		}
		undo = append(undo, func() error { return os.Remove(resolv) })
	case lerr == nil && fi.Mode().IsRegular():
		old, err := os.ReadFile(resolv)
		if err != nil {
			return nil, fmt.Errorf("preparing tree: %w", err)
		}
		if err := os.WriteFile(resolv, host, 0); err != nil { // in place: owner and mode stay
			return nil, fmt.Errorf("preparing tree: %w", err)
		}
		undo = append(undo, func() error {
			if fi, err := os.Lstat(resolv); err != nil || !fi.Mode().IsRegular() {
				return nil // the command replaced it: keep its choice
			}
			// Rewritten in place: owner and mode stay.
			if err := os.WriteFile(resolv, old, 0); err != nil {
				return fmt.Errorf("restoring %s: %w", resolv, err)
			}
			return nil
		})
	}
	return restore, nil
}
