package builder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/sandbox"
)

// Bounds of one run step in its sandbox. A build step is the recipe
// author's code, so they are wide: they stop a runaway step, not a
// hostile one.
const (
	stepTimeout = time.Hour
	stepMemory  = 8 << 30  // address space of each process
	stepScratch = 1 << 30  // /tmp, /run and /dev/shm together
	stepFiles   = 64 << 30 // size of any one file
	stepProcs   = 1024
)

// policyRcD keeps Debian's maintainer scripts from starting services
// while packages install in the tree.
const policyRcD = "#!/bin/sh\n# strata: no service starts while an image is built\nexit 101\n"

// runInTree runs the shell command cmd with the tree at root as its "/",
// in a sandbox (see internal/sandbox): the first process of new user,
// mount, PID, IPC, UTS and cgroup namespaces, root inside and an
// unprivileged id range outside, the tree bound writable through the id
// mapping (nothing else of the host's file systems), a fresh /proc, /dev,
// /tmp and /run, the host's network when network is set (else one of its
// own, with only loopback), the seccomp filter, no_new_privs and the
// bounds above. Each line of output goes to line. During the command,
// /usr/sbin/policy-rc.d exits 101 (unless the tree has its own) and
// /etc/resolv.conf is the host's, so package installs reach the network;
// both are put back afterwards.
func runInTree(ctx context.Context, root, cmd string, network bool, line func(string)) error {
	restore, err := prepareTree(root)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	tail := make(chan []string, 1)
	go func() { tail <- scanOutput(pr, line) }()
	_, runErr := sandbox.Run(ctx, sandbox.Spec{
		Root:     root,
		Argv:     []string{"/bin/sh", "-c", cmd},
		Env:      buildEnv(),
		Network:  network,
		Writable: true,
		RootCaps: true,
		Timeout:  stepTimeout,
		Memory:   stepMemory,
		Scratch:  stepScratch,
		FileSize: stepFiles,
		Procs:    stepProcs,
		Stream:   pw,
	})
	pw.Close()
	last := <-tail
	if runErr != nil {
		runErr = fmt.Errorf("%w; last output:\n%s", runErr, strings.Join(last, "\n"))
	}
	if err := restore(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// beneath opens the directory rel below the directory fd dir (O_PATH),
// never through a symbolic link and never out of it.
func beneath(dir int, rel string) (int, error) {
	return unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// prepareTree installs policy-rc.d and the host's resolv.conf in the tree
// and returns how to undo both. Every path is opened beneath root with
// no symbolic link: an earlier step may have made etc or usr/sbin a link
// out of the tree. What is not a real directory or regular file is left
// alone.
func prepareTree(root string) (func() error, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("preparing tree %s: %w", root, err)
	}
	var fds []int
	var undo []func() error
	restore := func() error {
		var first error
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](); err != nil && first == nil {
				first = err
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return first
	}
	defer unix.Close(rfd)
	fail := func(err error) (func() error, error) {
		_ = restore()
		return nil, fmt.Errorf("preparing tree %s: %w", root, err)
	}
	if sbin, err := beneath(rfd, "usr/sbin"); err == nil {
		fds = append(fds, sbin)
		if created, err := createIn(sbin, "policy-rc.d", []byte(policyRcD), 0o755); err != nil {
			return fail(err)
		} else if created {
			undo = append(undo, func() error {
				if err := unix.Unlinkat(sbin, "policy-rc.d", 0); err != nil && !errors.Is(err, unix.ENOENT) {
					return fmt.Errorf("removing %s/usr/sbin/policy-rc.d: %w", root, err)
				}
				return nil
			})
		}
	}
	host, herr := os.ReadFile("/etc/resolv.conf")
	etc, err := beneath(rfd, "etc")
	if herr != nil || err != nil {
		// No host resolver configuration, or no /etc: leave it.
		return restore, nil
	}
	fds = append(fds, etc)
	created, err := createIn(etc, "resolv.conf", host, 0o644)
	switch {
	case err != nil:
		return fail(err)
	case created:
		undo = append(undo, func() error {
			if err := unix.Unlinkat(etc, "resolv.conf", 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("removing %s/etc/resolv.conf: %w", root, err)
			}
			return nil
		})
		return restore, nil
	}
	old, err := rewriteIn(etc, "resolv.conf", host)
	if errors.Is(err, errNotRegular) {
		return restore, nil
	}
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() error {
		// Rewritten in place, owner and mode kept; a step that replaced
		// it with something else keeps its choice.
		if _, err := rewriteIn(etc, "resolv.conf", old); err != nil && !errors.Is(err, errNotRegular) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("restoring %s/etc/resolv.conf: %w", root, err)
		}
		return nil
	})
	return restore, nil
}

// errNotRegular reports a path that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// createIn makes the file name in the directory dir with data, unless
// something (a link too) is already there: created reports whether it did.
func createIn(dir int, name string, data []byte, mode uint32) (created bool, err error) {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := f.Chmod(os.FileMode(mode)); err != nil { // past the umask
		return true, fmt.Errorf("creating %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return true, fmt.Errorf("writing %s: %w", name, err)
	}
	return true, nil
}

// rewriteIn replaces the contents of the regular file name in the
// directory dir with data, in place (owner and mode stay), and returns
// what it held (at most 1 MiB is kept).
func rewriteIn(dir int, name string, data []byte) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, errNotRegular
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	old, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("rewriting %s: %w", name, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return nil, fmt.Errorf("rewriting %s: %w", name, err)
	}
	return old, nil
}
