package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/ctxio/ctxiotest"
	"github.com/strata-dev/strata/internal/fault"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay/offline"
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

// The helper run of TestUpgradeKilledBeforeEntry: the disk and image to
// upgrade, in a process the fault point kills.
const (
	helperDiskEnv  = "STRATA_TEST_UPGRADE_DISK"
	helperImageEnv = "STRATA_TEST_UPGRADE_IMAGE"
)

// An upgrade killed after it staged the upgrade and before its boot
// entry went live (issue 25, item 10) leaves a staged upgrade no boot
// will try. status --disk says so ("interrupted"), a dry run refuses
// without changing a byte, and the next upgrade drops it (and its
// never-renamed entry) before it upgrades again; a cancel drops it too.
func TestUpgradeKilledBeforeEntry(t *testing.T) {
	if d := os.Getenv(helperDiskEnv); d != "" {
		_, err := upgrade.Disk(context.Background(), d, upgrade.Options{Image: os.Getenv(helperImageEnv)})
		fmt.Fprintln(os.Stderr, "the upgrade was not killed:", err)
		os.Exit(1)
	}
	e := newEnv(t)
	ctx := context.Background()
	next := e.build(t, "up", "1.1.0", "2", e.key)
	kill := func() {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestUpgradeKilledBeforeEntry$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperDiskEnv+"="+e.disk, helperImageEnv+"="+next, fault.Env+"=upgrade-staged")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != fault.ExitCode {
			t.Fatalf("the upgrade killed before its entry went live: %v\n%s", err, out)
		}
		if entries := e.esp(t, "/loader/entries"); !strings.Contains(entries, "strata-2-b.new") {
			t.Fatalf("the killed upgrade left no pending entry:\n%s", entries)
		}
	}
	kill()
	st, err := offline.Status(ctx, e.disk)
	if err != nil {
		t.Fatal(err)
	}
	if st.Upgrade == nil || st.Upgrade.State != node.UpgradeInterrupted || st.Upgrade.Image.Version != "1.1.0" {
		t.Fatalf("status of the disk: upgrade %+v, want 1.1.0 interrupted", st.Upgrade)
	}
	before := e.sum(t)
	if _, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, DryRun: true}); !errors.Is(err, upgrade.ErrUnbootable) || !strings.Contains(err.Error(), "strata upgrade --cancel") {
		t.Fatalf("dry run over the interrupted upgrade: %v, want ErrUnbootable saying what to do", err)
	}
	if e.sum(t) != before {
		t.Fatal("the dry run changed the disk")
	}
	var steps []string
	rep, err := upgrade.Disk(ctx, e.disk, upgrade.Options{Image: next, Progress: func(s string) { steps = append(steps, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Abandoned == nil || rep.Abandoned.Record.Version != "1.1.0" || rep.Entry == nil || rep.Entry.File != "strata-2-b+3.conf" {
		t.Fatalf("upgrade over the interrupted one: abandoned %+v, entry %+v", rep.Abandoned, rep.Entry)
	}
	if !strings.Contains(strings.Join(steps, "\n"), "dropping the upgrade to image 1.1.0") {
		t.Errorf("progress does not say the interrupted upgrade was dropped: %q", steps)
	}
	if entries := e.esp(t, "/loader/entries"); strings.Contains(entries, ".new") || !strings.Contains(entries, "strata-2-b+3.conf") {
		t.Fatalf("entries after the upgrade:\n%s", entries)
	}
	if st, err := offline.Status(ctx, e.disk); err != nil || st.Upgrade == nil || st.Upgrade.State != node.UpgradeStaged {
		t.Fatalf("status after the upgrade: %v, %+v", err, st)
	}

	// A cancel drops an interrupted one too, the pending entry with it.
	if _, err := upgrade.CancelDisk(ctx, e.disk, 0); err != nil {
		t.Fatal(err)
	}
	kill()
	if u, err := upgrade.CancelDisk(ctx, e.disk, 0); err != nil || u.Record.Version != "1.1.0" {
		t.Fatalf("cancelling the interrupted upgrade: %v, %+v", err, u)
	}
	if entries := e.esp(t, "/loader/entries"); strings.Contains(entries, "strata-2-b") {
		t.Fatalf("entries after the cancel:\n%s", entries)
	}
	if st, err := offline.Status(ctx, e.disk); err != nil || st.Upgrade != nil {
		t.Fatalf("status after the cancel: %v, %+v", err, st)
	}
}
