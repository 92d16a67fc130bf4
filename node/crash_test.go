package node_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/node/restarter"
	"github.com/strata-dev/strata/tests/fixture"
)

// Crash tests re-execute the test binary as a helper process that runs
// Apply or Rollback on a node and dies at a crash point
// ($STRATA_TEST_CRASH, os.Exit(99) inside overlay.commit), as a power loss
// would. The parent then checks what the next run makes of the node.

const (
	helperRootEnv  = "STRATA_HELPER_ROOT"
	helperOpEnv    = "STRATA_HELPER_OP"
	helperFilesEnv = "STRATA_HELPER_FILES"
	crashEnv       = "STRATA_TEST_CRASH"
	crashExitCode  = 99
)

// TestHelperApply is the helper process when $STRATA_HELPER_ROOT is set.
// Run directly, it checks that the helper applies an overlay to completion
// when no crash point is set.
func TestHelperApply(t *testing.T) {
	if root := os.Getenv(helperRootEnv); root != "" {
		helperMain(t, root)
		return
	}
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	if code, out := runHelper(t, root, "", "apply", c.Path); code != 0 {
		t.Fatalf("helper exited %d:\n%s", code, out)
	}
	l := sqLedger(t, root)
	if sqCount(l, manifests.LedgerApply, "1.0.1") != 1 {
		t.Fatalf("helper did not apply 1.0.1: %v", sqActions(l))
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Fatalf("tree digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
}

func helperMain(t *testing.T, root string) {
	ctx := context.Background()
	var err error
	switch op := os.Getenv(helperOpEnv); op {
	case "apply":
		files := strings.Split(os.Getenv(helperFilesEnv), string(os.PathListSeparator))
		_, err = nodetest.Apply(ctx, root, node.Source{Files: files}, node.ApplyOptions{}, node.Options{})
	case "apply-restart":
		files := strings.Split(os.Getenv(helperFilesEnv), string(os.PathListSeparator))
		_, err = nodetest.Apply(ctx, root, node.Source{Files: files}, node.ApplyOptions{}, node.Options{Restarter: restarter.Exec{Template: "true"}})
	case "apply-failing":
		files := strings.Split(os.Getenv(helperFilesEnv), string(os.PathListSeparator))
		_, err = nodetest.Apply(ctx, root, node.Source{Files: files}, node.ApplyOptions{}, node.Options{Restarter: restarter.Exec{Template: "exit 1"}})
	case "rollback":
		_, err = nodetest.Rollback(ctx, root, "", node.Options{})
	default:
		t.Fatalf("unknown helper op %q", op)
	}
	if err != nil {
		t.Fatalf("helper %s: %v", os.Getenv(helperOpEnv), err)
	}
}

// runHelper runs the helper process and returns its exit code and output.
func runHelper(t *testing.T, root, crash, op string, files ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperApply$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperRootEnv+"="+root,
		helperOpEnv+"="+op,
		helperFilesEnv+"="+strings.Join(files, string(os.PathListSeparator)),
		crashEnv+"="+crash,
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("running helper: %v\n%s", err, out.String())
	return -1, ""
}

// crashHelper runs the helper expecting it to die at crash point.
func crashHelper(t *testing.T, root, crash, op string, files ...string) {
	t.Helper()
	code, out := runHelper(t, root, crash, op, files...)
	if code != crashExitCode {
		t.Fatalf("helper exited %d, want %d (crash at %s):\n%s", code, crashExitCode, crash, out)
	}
}

func txnPath(root string) string { return filepath.Join(root, manifests.StateDir, "txn") }

func undoPath(root, version string) string {
	return filepath.Join(root, manifests.StateDir, "undo", version)
}

func requireExists(t *testing.T, p string, want bool) {
	t.Helper()
	_, err := os.Lstat(p)
	if got := err == nil; got != want {
		t.Fatalf("%s exists = %v, want %v (%v)", p, got, want, err)
	}
}

// requireInterrupted checks that Verify reports the unfinished
// transaction a crash left.
func requireInterrupted(t *testing.T, root string) {
	t.Helper()
	a := fixture.Audit(t, root, "", false)
	if a.OK() {
		t.Fatal("Verify is OK on a node with an interrupted transaction")
	}
	found := false
	for _, f := range sqFindings(a, "chain") {
		found = found || strings.Contains(f.Message, "interrupted")
	}
	if !found {
		t.Fatalf("no chain finding names the interrupted transaction: %+v", a.Findings)
	}
}

func TestCrashBeforeLedgerNextApplyRollsBackThenApplies(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	before := fixture.Snap(t, root)

	crashHelper(t, root, "before-ledger", "apply", c.Path)
	// The ops ran, the ledger was not written: the tree is half-way.
	crashed := fixture.Snap(t, root)
	if crashed.Digest == before.Digest {
		t.Fatal("the crash left the tree untouched; the crash point is not after the ops")
	}
	if crashed.Ledger != before.Ledger {
		t.Fatal("the ledger changed before the before-ledger crash point")
	}
	requireExists(t, txnPath(root), true)
	requireInterrupted(t, root)

	// The next apply must first restore the pre-apply tree, then apply.
	var atStart *fixture.Snapshot
	progress := func(msg string) {
		if atStart == nil && strings.HasPrefix(msg, "applying") {
			s := fixture.Snap(t, root)
			atStart = &s
			if _, err := os.Stat(txnPath(root)); err == nil {
				t.Error("the interrupted transaction is still there when the new apply starts")
			}
		}
	}
	rep, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{Progress: progress})
	if err != nil {
		t.Fatalf("apply after crash: %v", err)
	}
	if atStart == nil {
		t.Fatal("apply reported no progress")
	}
	if atStart.Digest != before.Digest {
		t.Errorf("tree before re-apply %s, want the pre-apply %s", atStart.Digest, before.Digest)
	}
	if atStart.Ledger != before.Ledger {
		t.Error("ledger changed by the recovery")
	}
	if len(rep.Plans) != 1 || rep.Plans[0].AlreadyApplied {
		t.Fatalf("plans = %+v, want 1.0.1 applied", rep.Plans)
	}
	l := sqLedger(t, root)
	if sqCount(l, manifests.LedgerApply, "1.0.1") != 1 || len(l.Entries) != 2 {
		t.Fatalf("ledger = %v, want provision + one apply", sqActions(l))
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Errorf("tree digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
	requireExists(t, txnPath(root), false)

	// The recovered apply's undo data is sound.
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("after rollback digest %s, want %s", got, before.Digest)
	}
}

// A dry run never finishes an interrupted transaction: it refuses and
// changes nothing.
func TestCrashDryRunDoesNotRecover(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	crashHelper(t, root, "before-ledger", "apply", c.Path)
	crashed := fixture.Snap(t, root)
	_, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{DryRun: true}, node.Options{})
	fixture.ErrIs(t, err, node.ErrDrift, "interrupted")
	if fixture.Snap(t, root) != crashed {
		t.Error("the dry run changed the node")
	}
	requireExists(t, txnPath(root), true)
}

func TestCrashBeforeLedgerRollbackRecovers(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	before := fixture.Snap(t, root)
	crashHelper(t, root, "before-ledger", "apply", c.Path)

	_, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	fixture.ErrIs(t, err, node.ErrNothingToRollback)
	fixture.AssertUnchanged(t, root, before)
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}

func TestCrashAfterLedgerRollsForward(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	before := fixture.Snap(t, root)

	crashHelper(t, root, "after-ledger", "apply", c.Path)
	crashed := fixture.Snap(t, root)
	l := sqLedger(t, root)
	if sqCount(l, manifests.LedgerApply, "1.0.1") != 1 {
		t.Fatalf("ledger after the after-ledger crash = %v, want the apply record", sqActions(l))
	}
	requireExists(t, txnPath(root), true)
	requireExists(t, undoPath(root, "1.0.1"), false)
	requireInterrupted(t, root)

	// The next run finishes the transaction: the overlay stays applied.
	rep, err := apply(root, c.Path)
	if err != nil {
		t.Fatalf("apply after crash: %v", err)
	}
	if len(rep.Plans) != 1 || !rep.Plans[0].AlreadyApplied {
		t.Fatalf("plans = %+v, want 1.0.1 already applied", rep.Plans)
	}
	fixture.AssertUnchanged(t, root, crashed)
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Errorf("tree digest %s, want the overlay's %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
	requireExists(t, filepath.Join(undoPath(root, "1.0.1"), "journal.json"), true)

	rb, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	if err != nil {
		t.Fatalf("rollback after roll-forward: %v", err)
	}
	if rb.Reverted.Version != "1.0.1" || rb.Head.Version != "1.0.0" {
		t.Errorf("rollback %v -> %v", rb.Reverted, rb.Head)
	}
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("after rollback digest %s, want %s", got, before.Digest)
	}
}

func TestCrashAfterLedgerVerifyThenRollbackRecovers(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	before := fixture.Snap(t, root)
	crashHelper(t, root, "after-ledger", "apply", c.Path)
	// Verify changes nothing, not even a recovery.
	crashed := fixture.Snap(t, root)
	requireInterrupted(t, root)
	if fixture.Snap(t, root) != crashed {
		t.Fatal("Verify changed the node")
	}
	requireExists(t, txnPath(root), true)

	// Rollback first finishes the interrupted apply, then reverts it.
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); err != nil {
		t.Fatalf("rollback after crash: %v", err)
	}
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("after rollback digest %s, want %s", got, before.Digest)
	}
	l := sqLedger(t, root)
	if got := sqActions(l); !slices.Equal(got, []string{"provision 1.0.0", "apply 1.0.1", "rollback 1.0.1"}) {
		t.Errorf("ledger = %v", got)
	}
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}

func TestCrashDuringRollbackBeforeLedger(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	applied := fixture.Snap(t, root)

	crashHelper(t, root, "before-ledger", "rollback")
	if fixture.Snap(t, root).Digest == applied.Digest {
		t.Fatal("the crash left the tree untouched")
	}
	requireInterrupted(t, root)

	// The next run undoes the half rollback: the overlay stays applied.
	rep, err := apply(root, c.Path)
	if err != nil {
		t.Fatalf("apply after crash: %v", err)
	}
	if len(rep.Plans) != 1 || !rep.Plans[0].AlreadyApplied {
		t.Fatalf("plans = %+v, want 1.0.1 already applied", rep.Plans)
	}
	fixture.AssertUnchanged(t, root, applied)
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Errorf("tree digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
	// The undo data survived the interrupted rollback.
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if got := sqApplied(t, root); len(got) != 0 {
		t.Errorf("applied after rollback = %v", got)
	}
}

func TestCrashDuringRollbackAfterLedger(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	root := f.Provision()
	before := fixture.Snap(t, root)
	fixture.MustApply(t, root, c.Path)

	crashHelper(t, root, "after-ledger", "rollback")
	if got := sqApplied(t, root); len(got) != 0 {
		t.Fatalf("applied after committed rollback = %v", got)
	}
	requireInterrupted(t, root)

	// The next run finishes the rollback, so nothing is left to roll back.
	_, err := nodetest.Rollback(context.Background(), root, "", node.Options{})
	fixture.ErrIs(t, err, node.ErrNothingToRollback)
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("digest %s, want the pre-apply %s", got, before.Digest)
	}
	requireExists(t, txnPath(root), false)
	requireExists(t, undoPath(root, "1.0.1"), false)
	requireExists(t, filepath.Join(root, manifests.StateDir, "overlays", "1.0.1.json"), false)
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))

	// And the overlay can be applied again.
	fixture.MustApply(t, root, c.Path)
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c.Manifest.TreeDigest {
		t.Errorf("tree digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
	}
}

// A crash after any single journal op ("op-N") leaves a half-changed tree
// and no ledger record: the next apply must restore the pre-apply tree
// before it applies the overlay again.
func TestCrashMidOpsApplyRollsBack(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	nops := len(c.Manifest.Deletes) + len(c.Manifest.Entries)
	for i := range nops {
		t.Run("op-"+strconv.Itoa(i), func(t *testing.T) {
			root := f.Provision()
			before := fixture.Snap(t, root)
			crashHelper(t, root, "op-"+strconv.Itoa(i), "apply", c.Path)
			crashed := fixture.Snap(t, root)
			if crashed.Digest == before.Digest {
				t.Fatal("the crash left the tree untouched")
			}
			if crashed.Ledger != before.Ledger {
				t.Fatal("the ledger changed before the commit point")
			}
			requireInterrupted(t, root)

			var atStart *fixture.Snapshot
			progress := func(msg string) {
				if atStart == nil && strings.HasPrefix(msg, "applying") {
					s := fixture.Snap(t, root)
					atStart = &s
				}
			}
			if _, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{Progress: progress}); err != nil {
				t.Fatalf("apply after crash: %v", err)
			}
			if atStart == nil || atStart.Digest != before.Digest || atStart.Ledger != before.Ledger {
				t.Fatalf("recovery did not restore the pre-apply node (digest %v, want %s)", atStart, before.Digest)
			}
			a := fixture.Audit(t, root, f.Repo, true)
			fixture.RequireOK(t, a)
			if a.TreeDigest != c.Manifest.TreeDigest {
				t.Errorf("tree digest %s, want %s", a.TreeDigest, c.Manifest.TreeDigest)
			}
			if l := sqLedger(t, root); len(l.Entries) != 2 {
				t.Errorf("ledger = %v, want provision + apply", sqActions(l))
			}
			rollback(t, root)
			if got := fixture.Snap(t, root).Digest; got != before.Digest {
				t.Errorf("after rollback digest %s, want %s", got, before.Digest)
			}
		})
	}
}

// The same for a rollback interrupted after any op: the next run undoes
// the half rollback and the overlay stays applied.
func TestCrashMidOpsRollbackUndone(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	nops := len(c.Manifest.Deletes) + len(c.Manifest.Entries)
	for i := range nops {
		t.Run("op-"+strconv.Itoa(i), func(t *testing.T) {
			root := f.Provision()
			before := fixture.Snap(t, root)
			fixture.MustApply(t, root, c.Path)
			applied := fixture.Snap(t, root)
			crashHelper(t, root, "op-"+strconv.Itoa(i), "rollback")
			if fixture.Snap(t, root).Digest == applied.Digest {
				t.Fatal("the crash left the tree untouched")
			}
			requireInterrupted(t, root)

			rep, err := apply(root, c.Path)
			if err != nil {
				t.Fatalf("apply after crash: %v", err)
			}
			if len(rep.Plans) != 1 || !rep.Plans[0].AlreadyApplied {
				t.Fatalf("plans = %+v, want 1.0.1 already applied", rep.Plans)
			}
			fixture.AssertUnchanged(t, root, applied)
			rollback(t, root)
			if got := fixture.Snap(t, root).Digest; got != before.Digest {
				t.Errorf("after rollback digest %s, want %s", got, before.Digest)
			}
		})
	}
}

// A crash while the services of a switched change restart: the next run
// takes the change back and, since the services may have seen it, records
// a failed attempt with the restarts due.
func TestCrashDuringRestartsRecordsFailedAttempt(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	before := fixture.Snap(t, root)
	crashHelper(t, root, "restarting", "apply-restart", c.Path)
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); !errors.Is(err, node.ErrNothingToRollback) {
		t.Fatalf("rollback after the crash: %v, want node.ErrNothingToRollback (the change was never committed)", err)
	}
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("digest %s after recovery, want the old %s", got, before.Digest)
	}
	l := sqLedger(t, root)
	if got := sqActions(l); !slices.Equal(got, []string{"provision 1.0.0", "failed 1.0.1"}) {
		t.Fatalf("ledger = %v, want the failed attempt", got)
	}
	if p := l.PendingRestarts(); len(p) != 1 || p[0].Unit != "app.service" {
		t.Errorf("pending = %+v, want app.service due", p)
	}
	requireExists(t, filepath.Join(root, manifests.StateDir, "restarting"), false)
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}

// A crash inside a replacing op, after the old object moved away and
// before the new one moved in (the path is missing then): the next run
// restores the old tree exactly and the apply then succeeds.
func TestCrashInsideOpApplyRollsBack(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", sqRichChange(f))
	nops := len(c.Manifest.Deletes) + len(c.Manifest.Entries)
	fired := 0
	for i := range nops {
		point := "op-" + strconv.Itoa(i) + "-half"
		root := f.Provision()
		before := fixture.Snap(t, root)
		code, out := runHelper(t, root, point, "apply", c.Path)
		switch code {
		case 0:
			continue // op i replaces nothing: no point inside it
		case crashExitCode:
			fired++
		default:
			t.Fatalf("%s: helper exited %d:\n%s", point, code, out)
		}
		requireInterrupted(t, root)
		if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); !errors.Is(err, node.ErrNothingToRollback) {
			t.Fatalf("%s: rollback after the crash: %v, want node.ErrNothingToRollback", point, err)
		}
		if got := fixture.Snap(t, root); got.Digest != before.Digest || got.Ledger != before.Ledger {
			t.Fatalf("%s: recovery left digest %s, want the pre-apply %s (ledger unchanged)", point, got.Digest, before.Digest)
		}
		if _, err := nodetest.Apply(context.Background(), root, node.Source{Files: []string{c.Path}}, node.ApplyOptions{}, node.Options{}); err != nil {
			t.Fatalf("%s: apply after recovery: %v", point, err)
		}
		fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
	}
	if fired == 0 {
		t.Fatal("no op of the change has a point inside it: the test covers nothing")
	}
	t.Logf("crashed inside %d of %d ops", fired, nops)
}

// A crash after a failed restart took the change back, before the
// restarts on the old tree ran: the failed attempt is recorded with its
// restarts still due.
func TestCrashWhileTakingBackKeepsDebt(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	before := fixture.Snap(t, root)
	crashHelper(t, root, "taken-back", "apply-failing", c.Path)
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("digest %s after the crash, want the old %s", got, before.Digest)
	}
	l := sqLedger(t, root)
	if got := sqActions(l); !slices.Equal(got, []string{"provision 1.0.0", "failed 1.0.1"}) {
		t.Fatalf("ledger = %v, want the failed attempt", got)
	}
	if p := l.PendingRestarts(); len(p) != 1 || p[0].Unit != "app.service" {
		t.Errorf("pending = %+v, want app.service still due", p)
	}
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}
