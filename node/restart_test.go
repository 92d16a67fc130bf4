package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/node/restarter"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// rsLogger returns an Exec restarter that appends "{unit} {action}" to a
// log file, running prefix (shell) first, and the log's path.
func rsLogger(t *testing.T, prefix string) (restarter.Exec, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "restarts.log")
	return restarter.Exec{Template: prefix + "echo {unit} {action} >> '" + log + "'"}, log
}

// rsLines reads the restart log; a missing log is no lines.
func rsLines(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	var out []string
	for _, l := range strings.Split(s, "\n") {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

func rsApply(root string, r node.Restarter, files ...string) (*node.ApplyReport, error) {
	return nodetest.Apply(context.Background(), root, node.Source{Files: files}, node.ApplyOptions{}, node.Options{Restarter: r})
}

func rsDescribe(as []manifests.ServiceAction) []string {
	var out []string
	for _, a := range as {
		out = append(out, strings.TrimSpace(a.Unit+" "+string(a.Action)))
	}
	return out
}

func rsRequireNoDebt(t *testing.T, root string) {
	t.Helper()
	if p := sqLedger(t, root).PendingRestarts(); len(p) != 0 {
		t.Errorf("ledger has pending restarts %+v", p)
	}
}

func TestRestartOrderDaemonReloadFirstEachUnitOnce(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", overlay.Change{Adds: []overlay.Add{
		{Dest: "/usr/lib/systemd/system/other.service", Src: f.HostFile("[Service]\nExecStart=/usr/bin/other --new\n")},
		{Dest: "/usr/lib/systemd/system/app.service", Src: f.HostFile("[Service]\nExecStart=/usr/bin/app --new\n")},
		{Dest: "/usr/bin/app", Src: f.HostFile("#!/bin/sh\nexec sleep 1000\n")},
		{Dest: "/etc/app/app.conf", Src: f.HostFile("port 81\n")},
		{Dest: "/etc/app/conf.d/b.conf", Src: f.HostFile("b\n")},
		{Dest: "/etc/motd", Src: f.HostFile("unclaimed\n")},
	}})
	root := f.Provision()
	r, log := rsLogger(t, "")
	rep, err := rsApply(root, r, c.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"daemon-reload", "app.service restart", "other.service restart"}
	if got := rsLines(t, log); !slices.Equal(got, want) {
		t.Errorf("restart log = %q, want %q", got, want)
	}
	if got := rsDescribe(rep.Plans[0].Restarted); !slices.Equal(got, want) {
		t.Errorf("plan restarted = %q, want %q", got, want)
	}
	if !slices.Equal(rep.Plans[0].Unclaimed, []string{"etc/motd"}) {
		t.Errorf("unclaimed = %v, want etc/motd", rep.Plans[0].Unclaimed)
	}
	if len(rep.Pending) != 0 {
		t.Errorf("report pending = %+v", rep.Pending)
	}
	rsRequireNoDebt(t, root)
	l := sqLedger(t, root)
	if last := l.Last(); last.Action != manifests.LedgerRestart || len(last.Done) != 2 {
		t.Errorf("last ledger record %s with done %+v, want a restart record of both units", last.Action, last.Done)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if len(sqFindings(a, "pending-restart")) != 0 {
		t.Errorf("audit reports pending restarts: %+v", a.Findings)
	}
}

func TestRestartReloadForDeclaredReloadPath(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/conf.d/a.conf", "a2\n"))
	root := f.Provision()
	r, log := rsLogger(t, "")
	if _, err := rsApply(root, r, c.Path); err != nil {
		t.Fatal(err)
	}
	if got := rsLines(t, log); !slices.Equal(got, []string{"app.service reload"}) {
		t.Errorf("restart log = %q, want only a reload of app.service", got)
	}
	rsRequireNoDebt(t, root)
}

func TestRestartDeclaredPathRestarts(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	r, log := rsLogger(t, "")
	if _, err := rsApply(root, r, c.Path); err != nil {
		t.Fatal(err)
	}
	if got := rsLines(t, log); !slices.Equal(got, []string{"app.service restart"}) {
		t.Errorf("restart log = %q, want only a restart of app.service", got)
	}
	rsRequireNoDebt(t, root)
}

func TestRestartUnclaimedPathRestartsNothing(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "unclaimed\n"))
	root := f.Provision()
	r, log := rsLogger(t, "")
	rep, err := rsApply(root, r, c.Path)
	if err != nil {
		t.Fatal(err)
	}
	if got := rsLines(t, log); len(got) != 0 {
		t.Errorf("restart log = %q, want nothing", got)
	}
	if p := rep.Plans[0]; len(p.Actions) != 0 || !slices.Equal(p.Unclaimed, []string{"etc/motd"}) {
		t.Errorf("plan = %+v, want no actions and etc/motd unclaimed", p)
	}
	rsRequireNoDebt(t, root)
	if got := sqActions(sqLedger(t, root)); !slices.Equal(got, []string{"provision 1.0.0", "apply 1.0.1"}) {
		t.Errorf("ledger = %v", got)
	}
}

func TestRestartNilRestarterRecordsPending(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", overlay.Change{Adds: []overlay.Add{
		{Dest: "/etc/app/app.conf", Src: f.HostFile("port 81\n")},
		{Dest: "/usr/lib/systemd/system/other.service", Src: f.HostFile("[Service]\nExecStart=/usr/bin/other --new\n")},
	}})
	root := f.Provision()
	rep, err := rsApply(root, nil, c.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"app.service restart", "other.service restart"}
	if got := rsDescribe(rep.Pending); !slices.Equal(got, want) {
		t.Errorf("report pending = %q, want %q", got, want)
	}
	if len(rep.Plans[0].Restarted) != 0 {
		t.Errorf("restarted without a restarter: %+v", rep.Plans[0].Restarted)
	}
	pending := sqLedger(t, root).PendingRestarts()
	if got := rsDescribe(pending); !slices.Equal(got, want) {
		t.Fatalf("ledger pending = %q, want %q", got, want)
	}
	if !pending[1].DaemonReload || pending[0].DaemonReload {
		t.Errorf("pending = %+v, want daemon-reload only for other.service", pending)
	}
	if !slices.Equal(pending[0].Because, []string{"etc/app/app.conf"}) {
		t.Errorf("app.service pending because %v", pending[0].Because)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if w := sqFindings(a, "pending-restart"); len(w) != 2 || w[0].Severity != "warning" || !strings.Contains(w[0].Message+w[1].Message, "app.service") {
		t.Errorf("audit pending-restart findings = %+v", w)
	}
}

// A restart that fails every time: the change is taken back before it
// commits and the ledger records the failed attempt, with the restart
// that failed again on the old tree left due.
func TestRestartFailureTakesBack(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	before := fixture.Snap(t, root)
	r, _ := rsLogger(t, "case {unit} in app.service) echo app will not start >&2; exit 1;; esac; ")
	rep, err := rsApply(root, r, c.Path)
	fixture.ErrIs(t, err, node.ErrRestart, "app.service", "app will not start")
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("digest %s after the failed restart, want the previous %s", got, before.Digest)
	}
	if rep == nil || rep.To != rep.From {
		t.Errorf("report = %+v, want To back at From", rep)
	}
	l := sqLedger(t, root)
	if got := sqActions(l); !slices.Equal(got, []string{"provision 1.0.0", "failed 1.0.1"}) {
		t.Errorf("ledger = %v, want the failed attempt", got)
	}
	if last := l.Last(); !strings.Contains(last.Error, "app will not start") || last.Head != l.Entries[0].Head || len(last.Pending) != 1 {
		t.Errorf("failed record = %+v, want the error, the old head and app.service due", last)
	}
	if got := sqApplied(t, root); len(got) != 0 {
		t.Errorf("applied = %v", got)
	}
	fixture.RequireOK(t, fixture.Audit(t, root, f.Repo, true))
}

// Taking the change back worked; only the restart on the old tree failed
// again. The error must not claim that taking it back failed.
func TestRestartFailureMessageWhenTakeBackSucceeds(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	r, _ := rsLogger(t, "case {unit} in app.service) exit 1;; esac; ")
	_, err := rsApply(root, r, c.Path)
	fixture.ErrIs(t, err, node.ErrRestart, "overlay 1.0.1", "taken back", "app.service", "failed too")
	if strings.Contains(err.Error(), "taking 1.0.1 back failed") {
		t.Errorf("error %q says taking the change back failed, but it was taken back (ledger %v)", err, sqActions(sqLedger(t, root)))
	}
}

// A restart that fails once: the restart on the old files succeeds and
// leaves no restart debt.
func TestRestartFailureOnceTakeBackRestarts(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	root := f.Provision()
	before := fixture.Snap(t, root)
	mark := filepath.Join(t.TempDir(), "failed-once")
	r, log := rsLogger(t, "if [ ! -e '"+mark+"' ]; then touch '"+mark+"'; exit 1; fi; ")
	_, err := rsApply(root, r, c.Path)
	fixture.ErrIs(t, err, node.ErrRestart, "1.0.1", "taken back", "app.service")
	if got := fixture.Snap(t, root).Digest; got != before.Digest {
		t.Errorf("digest %s, want the previous %s", got, before.Digest)
	}
	if got := rsLines(t, log); !slices.Equal(got, []string{"app.service restart"}) {
		t.Errorf("restart log = %q, want the restart of app.service on the old tree", got)
	}
	if got := sqActions(sqLedger(t, root)); !slices.Equal(got, []string{"provision 1.0.0", "failed 1.0.1", "restart 1.0.1"}) {
		t.Errorf("ledger = %v", got)
	}
	rsRequireNoDebt(t, root)
}

// With two overlays, a failed restart of the second rolls back only the
// second.
func TestRestartFailureRollsBackOnlyFailingOverlay(t *testing.T) {
	f := fixture.New(t)
	c1 := f.Create("1.0.1", f.Change("/etc/app/app.conf", "port 81\n"))
	c2 := f.Create("1.0.2", f.Change("/usr/bin/other", "#!/bin/sh\nexit 3\n"))
	root := f.Provision()
	r, log := rsLogger(t, "case {unit} in other.service) exit 1;; esac; ")
	rep, err := rsApply(root, r, c1.Path, c2.Path)
	fixture.ErrIs(t, err, node.ErrRestart, "other.service")
	if rep == nil || rep.To != (manifests.Ref{Version: "1.0.1", Digest: c1.Digest}) {
		t.Errorf("report = %+v, want To 1.0.1", rep)
	}
	if got := sqApplied(t, root); !slices.Equal(got, []string{"1.0.1"}) {
		t.Errorf("applied = %v, want 1.0.1", got)
	}
	a := fixture.Audit(t, root, f.Repo, true)
	fixture.RequireOK(t, a)
	if a.TreeDigest != c1.Manifest.TreeDigest {
		t.Errorf("digest %s, want 1.0.1's %s", a.TreeDigest, c1.Manifest.TreeDigest)
	}
	if got := rsLines(t, log); !slices.Equal(got, []string{"app.service restart"}) {
		t.Errorf("restart log = %q", got)
	}
}

func TestRestartRollbackRunsPlanAndSettlesDebt(t *testing.T) {
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/conf.d/a.conf", "a2\n"))
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	if got := rsDescribe(sqLedger(t, root).PendingRestarts()); !slices.Equal(got, []string{"app.service reload"}) {
		t.Fatalf("pending after apply = %q", got)
	}
	r, log := rsLogger(t, "")
	rep, err := nodetest.Rollback(context.Background(), root, "", node.Options{Restarter: r})
	if err != nil {
		t.Fatal(err)
	}
	if got := rsDescribe(rep.Restarted); !slices.Equal(got, []string{"app.service reload"}) {
		t.Errorf("rollback restarted %q", got)
	}
	if got := rsLines(t, log); !slices.Equal(got, []string{"app.service reload"}) {
		t.Errorf("restart log = %q", got)
	}
	rsRequireNoDebt(t, root)
}

// A restart that fails is not forgotten (issue 22): every unit asked for
// is owed a restart, naming the failure, and status (its last failure),
// history and the restart debt say so until a restart that passes
// settles it.
func TestFailedRestartLeavesDebt(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	root := f.Provision()
	failing, _ := rsLogger(t, "echo 'app.service is failed' >&2; exit 1; ")
	_, err := nodetest.Restart(ctx, root, []string{"app.service"}, node.Options{Restarter: failing})
	fixture.ErrIs(t, err, node.ErrRestart, "app.service is failed")

	st, err := nodetest.Status(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 1 || st.Pending[0].Unit != "app.service" || !strings.Contains(strings.Join(st.Pending[0].Because, " "), "a restart failed") {
		t.Fatalf("restart debt after a failed restart: %+v, want app.service owed, naming the failure", st.Pending)
	}
	if f := st.LastFailure; f == nil || f.Action != manifests.LedgerRestart || !strings.Contains(f.Error, "app.service is failed") {
		t.Fatalf("last failure %+v, want the failed restart", st.LastFailure)
	}
	h, err := nodetest.History(root)
	if err != nil {
		t.Fatal(err)
	}
	if d := node.Describe(h.Entries[len(h.Entries)-1].LedgerEntry); !strings.Contains(d, "restart failed") || !strings.Contains(d, "app.service is failed") {
		t.Errorf("history's last entry says %q", d)
	}

	passing, log := rsLogger(t, "")
	// Another unit's restart passing settles nothing of app.service's.
	if _, err := nodetest.Restart(ctx, root, []string{"other.service"}, node.Options{Restarter: passing}); err != nil {
		t.Fatal(err)
	}
	if st, err = nodetest.Status(ctx, root); err != nil || st.LastFailure == nil || len(st.Pending) != 1 {
		t.Fatalf("after another unit's restart: last failure %+v, debt %+v (%v); want both still there", st.LastFailure, st.Pending, err)
	}
	if _, err := nodetest.Restart(ctx, root, []string{"app.service"}, node.Options{Restarter: passing}); err != nil {
		t.Fatal(err)
	}
	if got := rsLines(t, log); !slices.Equal(got, []string{"other.service restart", "app.service restart"}) {
		t.Errorf("restarts %v", got)
	}
	st, err = nodetest.Status(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Pending) != 0 || st.LastFailure != nil {
		t.Errorf("after a restart that passed: debt %+v, last failure %+v; want both settled", st.Pending, st.LastFailure)
	}
}

// A rollback whose restarts fail (issue 22) is committed, and its
// restarts are owed with the error, as a failed strata restart's are:
// status names the failure until a restart that passes settles it.
func TestRollbackFailedRestartLeavesDebt(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/app/conf.d/a.conf", "a2\n"))
	root := f.Provision()
	fixture.MustApply(t, root, c.Path)
	failing, _ := rsLogger(t, "echo 'app.service would not reload' >&2; exit 1; ")
	_, err := nodetest.Rollback(ctx, root, "", node.Options{Restarter: failing})
	fixture.ErrIs(t, err, node.ErrRestart, "rolled back 1.0.1", "app.service would not reload")
	st, err := nodetest.Status(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if st.Head.Version != "1.0.0" || len(st.Pending) != 1 || !strings.Contains(strings.Join(st.Pending[0].Because, " "), "would not reload") {
		t.Fatalf("after a rollback whose restart failed: head %s, debt %+v; want 1.0.0 with app.service owed, naming the failure", st.Head.Version, st.Pending)
	}
	if f := st.LastFailure; f == nil || f.Action != manifests.LedgerRestart || !strings.Contains(f.Error, "would not reload") {
		t.Fatalf("last failure %+v, want the rollback's failed restart", st.LastFailure)
	}
}
