package upgrade_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/ctxio/ctxiotest"
	"github.com/strata-dev/strata/upgrade"
)

// An upgrade interrupted at any step (SIGINT cancels the context; here
// it is cancelled as each progress step is reported, one run per step)
// stops there: it reports the cancellation and leaves the disk as it
// was, root B, the ESP and the state alike; or, cancelled as it reported
// its last step, it has finished and staged the upgrade.
func TestUpgradeDiskInterrupted(t *testing.T) {
	e := newEnv(t)
	next := e.build(t, "up", "1.1.0", "2", e.key)
	var before string
	var rep *upgrade.Report
	op := func(ctx context.Context, progress func(string)) (err error) {
		before = e.sum(t)
		rep, err = upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, Progress: progress})
		return err
	}
	ctxiotest.EveryStep(t, op, func(at string, stopped bool) {
		_, err := upgrade.CancelDisk(context.Background(), e.disk, 0)
		switch {
		case !stopped && (rep.Entry == nil || err != nil):
			t.Fatalf("cancelled at %q: finished without a boot entry (%+v) or could not be cancelled (%v)", at, rep.Entry, err)
		case stopped && e.sum(t) != before:
			t.Errorf("cancelled at %q: the interrupted upgrade changed the disk", at)
		case stopped && (err == nil || !strings.Contains(err.Error(), "no upgrade is staged")):
			t.Errorf("cancelled at %q: an upgrade is staged (%v)", at, err)
		}
	})
}

// A regeneration interrupted at any step leaves no image, manifest or
// temporary, not even the output directory it made, and nothing in
// $TMPDIR.
func TestRegenerateInterrupted(t *testing.T) {
	e := newEnv(t)
	tmp := os.Getenv("TMPDIR")
	var out string
	op := func(ctx context.Context, progress func(string)) error {
		out = filepath.Join(t.TempDir(), "out")
		_, err := builder.Regenerate(ctx, e.repo, "", "", out, builder.WithKey(e.key), builder.WithProgress(progress))
		return err
	}
	ctxiotest.EveryStep(t, op, func(at string, stopped bool) {
		if _, err := os.Lstat(out); stopped && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cancelled at %q: left the output directory it made (%v)", at, err)
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("cancelled at %q: left in $TMPDIR: %v", at, left)
		}
	})
}
