package overlayfs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk/disktest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/tests/fixture"
)

// TestMain runs the tests in a private mount namespace (testenv).
func TestMain(m *testing.M) { disktest.PrivateMounts(m) }

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
	testenv.RequireKernel(t)
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
	if rep := bootReport(t, image, state, root); rep.LayerRefused != nil {
		t.Fatalf("activation refused layer %s: %s", rep.LayerRefused.Version, rep.LayerRefused.Error)
	}
}

// bootReport is boot, returning what the activation reports.
func bootReport(t *testing.T, image, state, root string) *node.ActivateReport {
	t.Helper()
	mount(t, "-o", "loop,ro", image, root)
	t.Cleanup(func() { _ = exec.Command("umount", "-R", "-l", root).Run() })
	mount(t, "--bind", filepath.Join(state, "var"), filepath.Join(root, "var"))
	mount(t, "-t", "tmpfs", "tmpfs", filepath.Join(root, "run"))
	rep, err := nodetest.Activate(context.Background(), root, "")
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The overlayfs backend passes the shared conformance suite unchanged.
func TestConformance(t *testing.T) {
	nodetest.Run(t, newNode, fixture.Squashfs())
}
