package overlayfs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/overlay/overlaytest"
)

const privateEnv = "STRATA_TEST_PRIVATE_MOUNTS"

// TestMain runs the tests in a private mount namespace of their own: every
// mount they make (images, stacks) is gone when the process ends, however
// it ends.
func TestMain(m *testing.M) {
	if os.Getenv(privateEnv) == "" {
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), privateEnv+"=1")
		// Go makes / recursively private in the child after unshare.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				os.Exit(ee.ExitCode())
			}
			fmt.Fprintln(os.Stderr, "running the tests in a private mount namespace:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func mount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
}

// newNode boots image the way a disk node does, without a kernel: the
// squashfs read-only as the root, a state directory with the node's
// ledger bound on /var, a tmpfs on /run, then strata activate.
func newNode(t *testing.T, image string) string {
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	for _, d := range []string{root, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	im, err := repo.LoadImage(image, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := builder.WriteState(image, im, state); err != nil {
		t.Fatal(err)
	}
	boot(t, image, state, root)
	return root
}

// boot mounts the node's root and state and activates it.
func boot(t *testing.T, image, state, root string) {
	t.Helper()
	mount(t, "-o", "loop,ro", image, root)
	t.Cleanup(func() { _ = exec.Command("umount", "-R", "-l", root).Run() })
	mount(t, "--bind", filepath.Join(state, "var"), filepath.Join(root, "var"))
	mount(t, "-t", "tmpfs", "tmpfs", filepath.Join(root, "run"))
	if _, err := overlaytest.Activate(context.Background(), root, ""); err != nil {
		t.Fatal(err)
	}
}

// The overlayfs backend passes the shared conformance suite unchanged.
func TestConformance(t *testing.T) {
	overlaytest.Run(t, newNode)
}
