package disk_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/ctxio/ctxiotest"
)

// A provisioning interrupted at any step (the context cancelled as each
// progress step is reported, one run per step) reports the cancellation
// and leaves nothing: no disk, no half-written temporary, no parent
// directory it made, nothing in $TMPDIR; or, cancelled as it reported
// its last step, it has finished.
func TestProvisionDiskInterrupted(t *testing.T) {
	requireDiskTools(t)
	key := testKey(t)
	res := buildDemo(t, t.TempDir(), builder.WithKey(key))
	trust, _ := key.PublicKeySet()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var dir, d string
	op := func(ctx context.Context, progress func(string)) error {
		dir = t.TempDir()
		d = filepath.Join(dir, "new", "node.img")
		_, err := disk.Provision(ctx, res.Image, d, trust, disk.Options{NodeID: "n", Progress: progress})
		return err
	}
	ctxiotest.EveryStep(t, op, func(at string, stopped bool) {
		if _, err := os.Stat(d); !stopped && err != nil {
			t.Fatalf("cancelled at %q: finished without a disk: %v", at, err)
		}
		if left, _ := os.ReadDir(dir); stopped && len(left) != 0 {
			t.Errorf("cancelled at %q: left %v", at, left)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("cancelled at %q: left in $TMPDIR: %v", at, left)
		}
	})
}
