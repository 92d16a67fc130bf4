package node_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/fixture"
)

// recording restarts as told and remembers what it restarted.
type recording struct{ done []string }

func (r *recording) Resolve(context.Context, node.RestartPlan) (*systemd.Resolved, error) {
	return nil, nil
}

func (r *recording) Run(_ context.Context, p node.RestartPlan, _ *systemd.Resolved, report func(manifests.ServiceAction)) error {
	for _, a := range p.Actions {
		r.done = append(r.done, a.Unit)
		report(a)
	}
	return nil
}

func (r *recording) Undo(context.Context, node.RestartPlan, *systemd.Resolved, int, func(manifests.ServiceAction)) error {
	return nil
}

// manager is a service manager of the test's own: its units' runs as
// the test sets them, and a validation that refuses a config holding
// "bad" (as fixture.WithValidator's does, without the sandbox).
type manager struct {
	recording
	root      string
	runs      map[string]node.UnitRun
	validated int
}

func (m *manager) Observe(_ context.Context, units []string) (map[string]node.UnitRun, error) {
	out := map[string]node.UnitRun{}
	for _, u := range units {
		if r, ok := m.runs[u]; ok {
			out[u] = r
		}
	}
	return out, nil
}

func (m *manager) ValidateOnDisk(_ context.Context, argv []string) (string, error) {
	m.validated++
	raw, err := os.ReadFile(filepath.Join(m.root, "etc/app/app.conf"))
	if err != nil {
		return "", err
	}
	if strings.Contains(string(raw), "timeout") {
		return "", context.DeadlineExceeded // no verdict: it could not finish
	}
	if strings.Contains(string(raw), "bad") {
		return "app.conf: bad port", exec.Command("false").Run() // exit status 1
	}
	return "", nil
}

func unitOf(t *testing.T, root string, o node.Options, unit string) schema.UnitConfig {
	t.Helper()
	n, err := node.Open(root, o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.UnitsError != "" {
		t.Fatalf("units not read: %s", st.UnitsError)
	}
	for _, u := range st.Units {
		if u.Unit == unit {
			return u
		}
	}
	t.Fatalf("no unit %s in %+v", unit, st.Units)
	return schema.UnitConfig{}
}

func restartUnit(t *testing.T, root string, o node.Options, unit string) error {
	t.Helper()
	n, err := node.Open(root, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.Restart(context.Background(), []string{unit})
	return err
}

// Without a service manager to ask, a node knows what a unit loaded from
// strata's records of its restarts, else presumes it loaded what strata
// last wrote: a hand edit after that is a config the unit has not loaded
// (named, with what to do), a restart records what it loaded (a local
// edit it now runs), and putting the head's file back is again a config
// not loaded until the next restart.
func TestUnitConfigsFollowHandEdits(t *testing.T) {
	f := fixture.New(t)
	root := f.Provision()
	conf := filepath.Join(root, "etc/app/app.conf")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	r := &recording{}
	o := node.Options{Restarter: r}

	u := unitOf(t, root, o, "app.service")
	if !u.Current() || u.LoadedBy != "presumed" || u.Loaded != u.Disk || u.Disk != u.Head || u.Note != "" {
		t.Fatalf("a fresh node's app.service: %+v", u)
	}

	time.Sleep(1100 * time.Millisecond) // past the presumed load (ledger times are seconds)
	if err := os.WriteFile(conf, []byte("port 82\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u = unitOf(t, root, o, "app.service")
	if u.State != schema.UnitChanged || u.Loaded != "" || u.Disk == u.Head ||
		!slices.Equal(u.Differ, []string{"etc/app/app.conf"}) || !slices.Equal(u.Drift, []string{"etc/app/app.conf"}) ||
		!strings.Contains(u.Note, "etc/app/app.conf") || !strings.Contains(u.Note, "restart") {
		t.Fatalf("after a hand edit: %+v", u)
	}

	if err := restartUnit(t, root, o, "app.service"); err != nil {
		t.Fatal(err)
	}
	u = unitOf(t, root, o, "app.service")
	if u.State != schema.UnitLocalEdit || u.LoadedBy != "restart" || u.Loaded != u.Disk || u.Disk == u.Head || len(u.Differ) != 0 ||
		!strings.Contains(u.Note, "local edit of etc/app/app.conf") {
		t.Fatalf("restarted onto the hand edit: %+v", u)
	}

	if err := os.WriteFile(conf, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	u = unitOf(t, root, o, "app.service")
	if u.State != schema.UnitChanged || u.Disk != u.Head || u.Loaded == u.Disk || !slices.Equal(u.Differ, []string{"etc/app/app.conf"}) {
		t.Fatalf("the head's file back, not loaded yet: %+v", u)
	}
	if err := restartUnit(t, root, o, "app.service"); err != nil {
		t.Fatal(err)
	}
	if u = unitOf(t, root, o, "app.service"); !u.Current() || u.Loaded != u.Head {
		t.Fatalf("restarted onto the head's file: %+v", u)
	}
}

// With a service manager, a unit's start or reload time says what it
// loaded when strata did not restart it; a changed config on disk that
// is not the head's is validated once (not at every read), a bad one is
// named, and nothing restarts onto it. A unit restarted outside strata
// after strata's record loaded what was on disk then.
func TestUnitConfigsWithServiceManager(t *testing.T) {
	f := fixture.New(t, fixture.WithValidator())
	root := f.Provision()
	m := &manager{root: root, runs: map[string]node.UnitRun{
		"app.service": {Active: "active", InvocationID: strings.Repeat("a", 32), Since: time.Now()},
	}}
	o := node.Options{Restarter: m}
	if u := unitOf(t, root, o, "app.service"); !u.Current() || u.LoadedBy != "systemd" || u.InvocationID != strings.Repeat("a", 32) {
		t.Fatalf("a running app.service: %+v", u)
	}

	time.Sleep(50 * time.Millisecond) // past the kernel clock tick a ctime is taken from
	conf := filepath.Join(root, "etc/app/app.conf")
	if err := os.WriteFile(conf, []byte("port 81\nbad port\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := unitOf(t, root, o, "app.service")
	if u.State != schema.UnitBad || !strings.Contains(u.Note, "config on disk is bad") || !strings.Contains(u.Note, "bad port") {
		t.Fatalf("a bad hand edit: %+v", u)
	}
	unitOf(t, root, o, "app.service")
	if m.validated != 1 {
		t.Errorf("validated %d times for one config on disk, want 1", m.validated)
	}
	err := restartUnit(t, root, o, "app.service")
	fixture.ErrIs(t, err, node.ErrValidation, "app.service", "config on disk is bad", "bad port")
	if len(m.done) != 0 {
		t.Fatalf("restarted %v onto a bad config", m.done)
	}

	// A validation that cannot finish is no verdict: said, not kept,
	// and the unit is not called bad.
	time.Sleep(50 * time.Millisecond)
	if err := os.WriteFile(conf, []byte("port 81\ntimeout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if u = unitOf(t, root, o, "app.service"); u.State != schema.UnitChanged || !strings.Contains(u.Note, "not validated") {
		t.Fatalf("a validation that timed out: %+v", u)
	}
	before := m.validated
	unitOf(t, root, o, "app.service")
	if m.validated != before+1 {
		t.Errorf("a validation that timed out was kept: %d runs, want %d", m.validated, before+1)
	}

	// Fixed by hand: validates, still to be loaded.
	time.Sleep(50 * time.Millisecond) // past the kernel clock tick a ctime is taken from
	if err := os.WriteFile(conf, []byte("port 81\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u = unitOf(t, root, o, "app.service")
	if u.State != schema.UnitChanged || !strings.Contains(u.Note, "it validates") {
		t.Fatalf("a good hand edit: %+v", u)
	}
	if err := restartUnit(t, root, o, "app.service"); err != nil {
		t.Fatal(err)
	}
	if u = unitOf(t, root, o, "app.service"); u.State != schema.UnitLocalEdit || u.LoadedBy != "restart" {
		t.Fatalf("restarted onto the good hand edit: %+v", u)
	}

	// Restarted outside strata (a new run) after the file went back to
	// the head's: the record no longer stands, the manager's time does.
	if err := os.WriteFile(conf, []byte("port 80\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // past the kernel clock tick a ctime is taken from
	m.runs["app.service"] = node.UnitRun{Active: "active", InvocationID: strings.Repeat("b", 32), Since: time.Now()}
	if u = unitOf(t, root, o, "app.service"); !u.Current() || u.LoadedBy != "systemd" || u.InvocationID != strings.Repeat("b", 32) {
		t.Fatalf("restarted by hand onto the head's config: %+v", u)
	}

	// A failed unit is named as failed.
	m.runs["app.service"] = node.UnitRun{Active: "failed", Since: time.Now()}
	if u = unitOf(t, root, o, "app.service"); u.State != schema.UnitFailed || !strings.Contains(u.Note, "journalctl -u app.service") {
		t.Fatalf("a failed app.service: %+v", u)
	}
}

// The loaded record is node state, hostile until checked: a record with
// no units map is an empty one (no panic), a record that does not decode
// is named in status (every unit unproven) and started afresh by the
// next restart, which says so.
func TestLoadedRecordHostile(t *testing.T) {
	f := fixture.New(t)
	root := f.Provision()
	rec := filepath.Join(root, "var/lib/strata/loaded.json")
	if err := os.WriteFile(rec, []byte(`{"schema":1,"kind":"loaded","units":null}`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := node.Options{Restarter: &recording{}}
	if err := restartUnit(t, root, o, "app.service"); err != nil {
		t.Fatalf("restart over a record with no units map: %v", err)
	}
	if u := unitOf(t, root, o, "app.service"); u.LoadedBy != "restart" {
		t.Fatalf("after the restart: %+v", u)
	}
	if err := os.WriteFile(rec, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(root, o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.Status(context.Background())
	if err != nil || !strings.Contains(st.UnitsError, "loaded record") {
		t.Fatalf("status over a record that does not decode: units error %q (%v)", st.UnitsError, err)
	}
	var lines []string
	o.Progress = func(s string) { lines = append(lines, s) }
	if err := restartUnit(t, root, o, "app.service"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "the old record is dropped") {
		t.Errorf("the restart did not say it dropped the record: %q", lines)
	}
	if u := unitOf(t, root, o, "app.service"); u.LoadedBy != "restart" {
		t.Fatalf("after the record was started afresh: %+v", u)
	}
}
