package overlayfs

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/manifests"
)

// RunStaged runs argv (a service's validation command) against a staged,
// not yet switched apply: in a private mount namespace whose stacks
// already hold the new layer at the real paths, chrooted at the node's
// root, so the command reads the new configuration while the node and
// its services go on seeing the old one. Only an active node can do this.
// The output (at most 64 KiB) is returned.
func (b *Backend) RunStaged(ctx context.Context, nt node.Txn, argv []string) (string, error) {
	t, ok := nt.(*txn)
	if !ok || t.b != b || t.j.Kind != "apply" || t.switched {
		return "", fmt.Errorf("running %s: not a staged apply of this node", argv[0])
	}
	if err := manifests.ValidCommand(argv); err != nil {
		return "", err
	}
	live, err := b.Live()
	if err != nil {
		return "", err
	}
	if !live {
		return "", fmt.Errorf("running %s against layer %s: the node's stacks are not active (run strata activate)", argv[0], t.j.Record.Version)
	}
	layers, err := t.layers(false)
	if err != nil {
		return "", err
	}
	layers = append(layers, ".new-"+t.j.Record.Version)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The namespace belongs to this thread alone. The thread is never
		// unlocked: it ends with this goroutine, and the namespace with it.
		runtime.LockOSThread()
		out, err := b.runPrivate(ctx, layers, argv)
		done <- result{out, err}
	}()
	r := <-done
	return r.out, r.err
}

// runPrivate runs on a locked thread: unshare the mount namespace, stack
// layers, run argv chrooted at the node's root.
func (b *Backend) runPrivate(ctx context.Context, layers, argv []string) (string, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return "", fmt.Errorf("private mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("private mount namespace: making mounts private: %w", err)
	}
	if err := b.restack(layers); err != nil {
		return "", err
	}
	var out bytes.Buffer
	w := &capped{b: &out, n: 64 << 10}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: b.n.Root}
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
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
