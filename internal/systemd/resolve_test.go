package systemd

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

const libc = "usr/lib/x86_64-linux-gnu/libc.so.6"

// running, exited, dead build snapshot entries.
func running(id string, pid int, aliases ...string) Unit {
	return Unit{ID: id, Names: append([]string{id}, aliases...), LoadState: "loaded", ActiveState: "active", SubState: "running", Type: "simple", MainPID: pid}
}

func exited(id string) Unit {
	return Unit{ID: id, Names: []string{id}, LoadState: "loaded", ActiveState: "active", SubState: "exited", Type: "oneshot"}
}

func dead(id, typ string) Unit {
	return Unit{ID: id, Names: []string{id}, LoadState: "loaded", ActiveState: "inactive", SubState: "dead", Type: typ}
}

// debianSnapshot is the running Debian node of the libc case.
func debianSnapshot() []Unit {
	audit := running("auditd.service", 90)
	audit.RefuseManualStop = true
	failed := dead("ntpsec.service", "forking")
	failed.ActiveState, failed.SubState = "failed", "failed"
	return []Unit{
		running("cron.service", 110),
		running("nginx.service", 120),
		running("rsyslog.service", 130, "syslog.service"),
		running("dbus.service", 140, "messagebus.service"),
		running("systemd-logind.service", 150, "dbus-org.freedesktop.login1.service"),
		running("systemd-journald.service", 160),
		running("systemd-udevd.service", 170),
		running("getty@tty1.service", 180),
		running("getty@tty2.service", 181),
		running("serial-getty@ttyS0.service", 190),
		running("user@0.service", 200),
		running("systemd-hostnamed.service", 210, "dbus-org.freedesktop.hostname1.service"),
		audit,
		failed,
		exited("systemd-remount-fs.service"),
		exited("systemd-sysctl.service"),
		dead("systemd-halt.service", "oneshot"),
		dead("systemd-kexec.service", "oneshot"),
		dead("rescue.service", "idle"),
		dead("emergency.service", "idle"),
		dead("initrd-switch-root.service", "oneshot"),
		dead("apt-daily-upgrade.service", "oneshot"),
		{ID: "multi-user.target", Names: []string{"multi-user.target"}, LoadState: "loaded", ActiveState: "active", SubState: "active"},
		{ID: "dbus.socket", Names: []string{"dbus.socket"}, LoadState: "loaded", ActiveState: "active", SubState: "running"},
		{ID: "exim4.service", Names: []string{"exim4.service"}, LoadState: "not-found", ActiveState: "inactive", SubState: "dead"},
	}
}

// debianUnits are the catalog units of the node: every one links libc.
var debianUnits = []string{
	"apt-daily-upgrade.service", "auditd.service", "container-getty@.service", "cron.service",
	"dbus.service", "emergency.service", "exim4.service", "getty@.service", "initrd-switch-root.service",
	"nginx.service", "ntpsec.service", "rescue.service", "rsyslog.service", "serial-getty@.service",
	"ssh@.service", "syslog.service", "systemd-halt.service", "systemd-hostnamed.service",
	"systemd-journald.service", "systemd-kexec.service", "systemd-logind.service",
	"systemd-remount-fs.service", "systemd-sysctl.service", "systemd-udevd.service", "user@.service",
}

func debianCatalog() manifests.Catalog {
	var cat manifests.Catalog
	for _, u := range debianUnits {
		s := manifests.Service{
			Unit:      u,
			UnitFiles: []string{"lib/systemd/system/" + u},
			Binaries:  []string{"usr/sbin/" + strings.TrimSuffix(u, ".service")},
			Libraries: []string{libc},
		}
		if u == "systemd-sysctl.service" {
			s.Paths = []string{"etc/sysctl.d"}
		}
		if u == "rsyslog.service" || u == "syslog.service" {
			s.ReloadPaths = []string{"etc/rsyslog.d"}
		}
		cat.Services = append(cat.Services, s)
	}
	return cat
}

func planAll(action manifests.Action, because ...string) []manifests.ServiceAction {
	var out []manifests.ServiceAction
	for _, u := range debianUnits {
		out = append(out, manifests.ServiceAction{Unit: u, Action: action, Because: because})
	}
	return out
}

// brief is the comparable core of a Held entry.
type brief struct {
	Unit, From string
	Reason     Reason
}

func briefs(h []Held) []brief {
	out := []brief{}
	for _, e := range h {
		out = append(out, brief{e.Unit, e.From, e.Reason})
	}
	return out
}

type stepBrief struct {
	Unit   string
	Action Verb
	From   string
}

func stepBriefs(s []Step) []stepBrief {
	out := []stepBrief{}
	for _, e := range s {
		out = append(out, stepBrief{e.Unit, e.Action, e.From})
	}
	return out
}

// checkResolved is the invariant checker: every plan name is accounted
// for, every step is an active loaded service acted on once and never a
// protected unit, the order is stops first then by unit.
func checkResolved(t *testing.T, req Request, units []Unit, r Resolved) {
	t.Helper()
	snap := newSnapshot(units)
	never := req.NeverRestart
	if never == nil {
		never = DefaultNeverRestart()
	}
	seen := map[string]bool{}
	accounted := map[string]bool{}
	for i, st := range r.Steps {
		if seen[st.Unit] {
			t.Errorf("unit %s acted on twice", st.Unit)
		}
		seen[st.Unit] = true
		u := snap.byName[st.Unit]
		if u == nil || u.ID != st.Unit || !u.Active() || !strings.HasSuffix(u.ID, ".service") {
			t.Errorf("step %+v: not an active loaded service by its ID: %+v", st, u)
		}
		if re, _ := neverRestart([]string{st.Unit}, never); re != nil {
			t.Errorf("step %+v on a never-restart unit (%s)", st, re)
		}
		if u != nil && (u.RefuseManualStop || u.RefuseManualStart) {
			t.Errorf("step %+v on a unit refusing manual start/stop", st)
		}
		if i > 0 {
			prev := r.Steps[i-1]
			if prev.Action != VerbStop && st.Action == VerbStop {
				t.Errorf("stop of %s after a restart", st.Unit)
			}
			if (prev.Action == VerbStop) == (st.Action == VerbStop) && prev.Unit >= st.Unit {
				t.Errorf("steps out of order: %s before %s", prev.Unit, st.Unit)
			}
		}
		accounted[st.From] = true
		for _, n := range st.Also {
			accounted[n] = true
		}
	}
	for _, d := range r.Deferred {
		accounted[d.From] = true
		if seen[d.Unit] {
			t.Errorf("unit %s both acted on and deferred", d.Unit)
		}
	}
	for _, s := range r.Skipped {
		accounted[s.Unit] = true
		accounted[s.From] = true
	}
	for _, a := range req.Actions {
		if !accounted[a.Unit] {
			t.Errorf("plan unit %s is not accounted for", a.Unit)
		}
	}
	if r.DaemonReexec != (len(r.ReexecBecause) > 0) {
		t.Errorf("DaemonReexec %v with ReexecBecause %v", r.DaemonReexec, r.ReexecBecause)
	}
}

func TestResolveDebianLibc(t *testing.T) {
	req := Request{Actions: planAll(manifests.ActionRestart, libc), Catalog: debianCatalog(), Changed: []string{libc}}
	units := debianSnapshot()
	r := Resolve(req, units)
	checkResolved(t, req, units, r)

	if !r.DaemonReexec || !reflect.DeepEqual(r.ReexecBecause, []string{libc}) {
		t.Errorf("reexec = %v %v, want true [%s]", r.DaemonReexec, r.ReexecBecause, libc)
	}
	if r.DaemonReload {
		t.Error("DaemonReload set, but no unit file changed")
	}
	wantSteps := []stepBrief{
		{"cron.service", VerbTryRestart, "cron.service"},
		{"nginx.service", VerbTryRestart, "nginx.service"},
		{"rsyslog.service", VerbTryRestart, "rsyslog.service"},
		{"systemd-hostnamed.service", VerbTryRestart, "systemd-hostnamed.service"},
		{"systemd-journald.service", VerbTryRestart, "systemd-journald.service"},
		{"systemd-udevd.service", VerbTryRestart, "systemd-udevd.service"},
	}
	if got := stepBriefs(r.Steps); !reflect.DeepEqual(got, wantSteps) {
		t.Errorf("steps:\n got %+v\nwant %+v", got, wantSteps)
	}
	if got := r.Steps[2].Also; !reflect.DeepEqual(got, []string{"syslog.service"}) {
		t.Errorf("rsyslog step Also = %v, want [syslog.service]", got)
	}
	wantDeferred := []brief{
		{"auditd.service", "auditd.service", ReasonRefuseManual},
		{"dbus.service", "dbus.service", ReasonNeverRestart},
		{"getty@tty1.service", "getty@.service", ReasonNeverRestart},
		{"getty@tty2.service", "getty@.service", ReasonNeverRestart},
		{"serial-getty@ttyS0.service", "serial-getty@.service", ReasonNeverRestart},
		{"systemd-logind.service", "systemd-logind.service", ReasonNeverRestart},
		{"user@0.service", "user@.service", ReasonNeverRestart},
	}
	if got := briefs(r.Deferred); !reflect.DeepEqual(got, wantDeferred) {
		t.Errorf("deferred:\n got %+v\nwant %+v", got, wantDeferred)
	}
	wantSkipped := []brief{
		{"apt-daily-upgrade.service", "apt-daily-upgrade.service", ReasonInactive},
		{"container-getty@.service", "", ReasonNoInstances},
		{"emergency.service", "emergency.service", ReasonInactive},
		{"exim4.service", "exim4.service", ReasonNotLoaded},
		{"initrd-switch-root.service", "initrd-switch-root.service", ReasonInactive},
		{"ntpsec.service", "ntpsec.service", ReasonInactive},
		{"rescue.service", "rescue.service", ReasonInactive},
		{"ssh@.service", "", ReasonNoInstances},
		{"syslog.service", "syslog.service", ReasonAlias},
		{"systemd-halt.service", "systemd-halt.service", ReasonInactive},
		{"systemd-kexec.service", "systemd-kexec.service", ReasonInactive},
		{"systemd-remount-fs.service", "systemd-remount-fs.service", ReasonNoProcess},
		{"systemd-sysctl.service", "systemd-sysctl.service", ReasonNoProcess},
	}
	if got := briefs(r.Skipped); !reflect.DeepEqual(got, wantSkipped) {
		t.Errorf("skipped:\n got %+v\nwant %+v", got, wantSkipped)
	}
	for _, d := range r.Deferred {
		if !strings.Contains(d.Detail, "reboot required") {
			t.Errorf("deferred %s: detail %q does not say reboot required", d.Unit, d.Detail)
		}
	}
}

func TestResolveRules(t *testing.T) {
	restart, reload, stop := manifests.ActionRestart, manifests.ActionReload, manifests.ActionStop
	act := func(unit string, a manifests.Action, because ...string) manifests.ServiceAction {
		return manifests.ServiceAction{Unit: unit, Action: a, Because: because}
	}
	tests := []struct {
		name     string
		req      Request
		steps    []stepBrief
		deferred []brief
		skipped  []brief
		reexec   bool
		reload   bool
	}{
		{
			name:  "declared path change on an active oneshot acts",
			req:   Request{Actions: []manifests.ServiceAction{act("systemd-sysctl.service", restart, "etc/sysctl.d/99-x.conf")}},
			steps: []stepBrief{{"systemd-sysctl.service", VerbTryRestart, "systemd-sysctl.service"}},
		},
		{
			name: "unit file change on an active oneshot acts, with daemon-reload",
			req: Request{Actions: []manifests.ServiceAction{{Unit: "systemd-remount-fs.service", Action: restart, DaemonReload: true,
				Because: []string{"lib/systemd/system/systemd-remount-fs.service"}}}},
			steps:  []stepBrief{{"systemd-remount-fs.service", VerbTryRestart, "systemd-remount-fs.service"}},
			reload: true,
		},
		{
			name:    "binary change on an exited oneshot is skipped",
			req:     Request{Actions: []manifests.ServiceAction{act("systemd-sysctl.service", restart, "usr/sbin/systemd-sysctl")}},
			skipped: []brief{{"systemd-sysctl.service", "systemd-sysctl.service", ReasonNoProcess}},
		},
		{
			name:  "reload through an alias reloads the unit",
			req:   Request{Actions: []manifests.ServiceAction{act("syslog.service", reload, "etc/rsyslog.d/a.conf")}},
			steps: []stepBrief{{"rsyslog.service", VerbTryReloadOrRestart, "syslog.service"}},
		},
		{
			name: "reload and restart of one unit merge to one restart",
			req: Request{Actions: []manifests.ServiceAction{
				act("syslog.service", reload, "etc/rsyslog.d/a.conf"),
				act("rsyslog.service", restart, "usr/sbin/rsyslogd"),
			}},
			steps:   []stepBrief{{"rsyslog.service", VerbTryRestart, "rsyslog.service"}},
			skipped: []brief{{"syslog.service", "syslog.service", ReasonAlias}},
		},
		{
			name: "stops first and only of active units by their ID",
			req: Request{Actions: []manifests.ServiceAction{
				act("nginx.service", stop, "lib/systemd/system/nginx.service"),
				act("cron.service", restart, libc),
				act("ntpsec.service", stop, "lib/systemd/system/ntpsec.service"),
				act("syslog.service", stop, "etc/systemd/system/syslog.service"),
				act("dbus.service", stop, "lib/systemd/system/dbus.service"),
				act("systemd-remount-fs.service", stop, "lib/systemd/system/systemd-remount-fs.service"),
			}},
			steps: []stepBrief{
				{"nginx.service", VerbStop, "nginx.service"},
				{"systemd-remount-fs.service", VerbStop, "systemd-remount-fs.service"},
				{"cron.service", VerbTryRestart, "cron.service"},
			},
			deferred: []brief{{"dbus.service", "dbus.service", ReasonNeverRestart}},
			skipped: []brief{
				{"ntpsec.service", "ntpsec.service", ReasonInactive},
				{"syslog.service", "", ReasonAliasStop},
			},
		},
		{
			name:   "PID 1's program changed: reexec, and nothing restarts for it",
			req:    Request{Changed: []string{"lib/systemd/systemd", "usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so"}},
			reexec: true,
		},
		{
			name:   "caller's manager files replace the defaults",
			req:    Request{Changed: []string{libc, "opt/init"}, ManagerFiles: []string{"opt/init"}},
			reexec: true,
		},
		{
			name: "non-service units are deferred",
			req: Request{Actions: []manifests.ServiceAction{
				{Unit: "dbus.socket", Action: restart, DaemonReload: true, Because: []string{"lib/systemd/system/dbus.socket"}},
				act("multi-user.target", restart, "etc/x"),
				act("dbus.service", restart, libc),
			}},
			deferred: []brief{
				{"dbus.service", "dbus.service", ReasonNeverRestart},
				{"dbus.socket", "dbus.socket", ReasonUnitType},
				{"multi-user.target", "multi-user.target", ReasonUnitType},
			},
			reload: true,
		},
		{
			name: "custom never-restart list replaces the defaults",
			req: Request{
				Actions:      []manifests.ServiceAction{act("nginx.service", restart, libc), act("dbus.service", restart, libc)},
				NeverRestart: []*regexp.Regexp{regexp.MustCompile(`^nginx`)},
			},
			steps:    []stepBrief{{"dbus.service", VerbTryRestart, "dbus.service"}},
			deferred: []brief{{"nginx.service", "nginx.service", ReasonNeverRestart}},
		},
		{
			name:    "an alias of a bus name does not make a unit never-restart",
			req:     Request{Actions: []manifests.ServiceAction{act("systemd-hostnamed.service", restart, libc)}},
			steps:   []stepBrief{{"systemd-hostnamed.service", VerbTryRestart, "systemd-hostnamed.service"}},
			skipped: nil,
		},
		{
			name:     "a protected alias name defers its unit",
			req:      Request{Actions: []manifests.ServiceAction{act("messagebus.service", restart, libc)}},
			deferred: []brief{{"dbus.service", "messagebus.service", ReasonNeverRestart}},
		},
		{
			name: "template instance named directly and through its template acts once",
			req: Request{
				Actions:      []manifests.ServiceAction{act("getty@.service", restart, libc), act("getty@tty1.service", restart, libc)},
				NeverRestart: []*regexp.Regexp{},
			},
			steps: []stepBrief{
				{"getty@tty1.service", VerbTryRestart, "getty@tty1.service"},
				{"getty@tty2.service", VerbTryRestart, "getty@.service"},
			},
		},
		{
			name:    "invalid and unknown names",
			req:     Request{Actions: []manifests.ServiceAction{act("-x.service", restart), act("nope.service", restart), act("bad name.service", restart)}},
			skipped: []brief{{"-x.service", "", ReasonInvalidName}, {"bad name.service", "", ReasonInvalidName}, {"nope.service", "", ReasonNotLoaded}},
		},
		{
			name: "an active unit whose definition is gone is deferred, but can be stopped",
			req: Request{Actions: []manifests.ServiceAction{
				act("gone.service", restart, libc), act("gone2.service", stop, "lib/systemd/system/gone2.service")}},
			steps:    []stepBrief{{"gone2.service", VerbStop, "gone2.service"}},
			deferred: []brief{{"gone.service", "gone.service", ReasonLoadState}},
		},
	}
	units := append(debianSnapshot(),
		Unit{ID: "gone.service", LoadState: "not-found", ActiveState: "active", SubState: "running", MainPID: 5},
		Unit{ID: "gone2.service", LoadState: "not-found", ActiveState: "active", SubState: "running", MainPID: 6},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Catalog = debianCatalog()
			r := Resolve(tt.req, units)
			checkResolved(t, tt.req, units, r)
			if tt.steps == nil {
				tt.steps = []stepBrief{}
			}
			if tt.deferred == nil {
				tt.deferred = []brief{}
			}
			if tt.skipped == nil {
				tt.skipped = []brief{}
			}
			if got := stepBriefs(r.Steps); !reflect.DeepEqual(got, tt.steps) {
				t.Errorf("steps:\n got %+v\nwant %+v", got, tt.steps)
			}
			if got := briefs(r.Deferred); !reflect.DeepEqual(got, tt.deferred) {
				t.Errorf("deferred:\n got %+v\nwant %+v", got, tt.deferred)
			}
			if got := briefs(r.Skipped); !reflect.DeepEqual(got, tt.skipped) {
				t.Errorf("skipped:\n got %+v\nwant %+v", got, tt.skipped)
			}
			if r.DaemonReexec != tt.reexec || r.DaemonReload != tt.reload {
				t.Errorf("reexec, reload = %v, %v; want %v, %v", r.DaemonReexec, r.DaemonReload, tt.reexec, tt.reload)
			}
		})
	}
}

// TestResolveDeterministic shuffles the snapshot and the plan: the result
// and its JSON must not change.
func TestResolveDeterministic(t *testing.T) {
	req := Request{Actions: planAll(manifests.ActionRestart, libc), Catalog: debianCatalog(), Changed: []string{libc}}
	want, err := json.Marshal(Resolve(req, debianSnapshot()))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		units := debianSnapshot()
		rng.Shuffle(len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
		rng.Shuffle(len(req.Actions), func(i, j int) { req.Actions[i], req.Actions[j] = req.Actions[j], req.Actions[i] })
		got, err := json.Marshal(Resolve(req, units))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("shuffle %d changed the result:\n got %s\nwant %s", i, got, want)
		}
	}
}

func TestResolvedJSON(t *testing.T) {
	b, err := json.Marshal(Resolve(Request{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"steps":[],"deferred":[],"skipped":[]}`; got != want {
		t.Errorf("empty plan JSON = %s, want %s", got, want)
	}
}

func TestTemplate(t *testing.T) {
	for _, tt := range []struct {
		name, tmpl string
		inst, isT  bool
	}{
		{"getty@tty1.service", "getty@.service", true, false},
		{"getty@.service", "", false, true},
		{"nginx.service", "", false, false},
		{"a@b@c.service", "a@.service", true, false},
		{"@x.service", "", false, false},
	} {
		tmpl, inst := Template(tt.name)
		if tmpl != tt.tmpl || inst != tt.inst || IsTemplate(tt.name) != tt.isT {
			t.Errorf("%s: Template = %q, %v; IsTemplate = %v; want %q, %v, %v", tt.name, tmpl, inst, IsTemplate(tt.name), tt.tmpl, tt.inst, tt.isT)
		}
	}
}

func TestTakeBack(t *testing.T) {
	r := Resolved{DaemonReload: true, Steps: []Step{
		{Unit: "a.service", Action: VerbTryRestart},
		{Unit: "b.service", Action: VerbTryReloadOrRestart},
		{Unit: "c.service", Action: VerbStop},
		{Unit: "d.service", Action: VerbTryRestart},
	}}
	got := TakeBack(r, 3)
	want := []Step{{Unit: "a.service", Action: VerbRestart}, {Unit: "b.service", Action: VerbReloadOrRestart}, {Unit: "c.service", Action: VerbRestart}}
	if !got.DaemonReload || len(got.Steps) != len(want) {
		t.Fatalf("TakeBack = %+v", got)
	}
	for i := range want {
		if got.Steps[i].Unit != want[i].Unit || got.Steps[i].Action != want[i].Action {
			t.Errorf("step %d = %+v, want %+v", i, got.Steps[i], want[i])
		}
	}
	if n := len(TakeBack(r, 99).Steps); n != 4 {
		t.Errorf("TakeBack past the end: %d steps", n)
	}
}

// An operator's restart (RestartFailed) brings a failed unit back with
// restart; a change's plan leaves it, and an inactive unit, alone.
func TestResolveRestartFailed(t *testing.T) {
	units := []Unit{
		{ID: "a.service", LoadState: "loaded", ActiveState: "failed", SubState: "failed", Type: "simple"},
		{ID: "b.service", LoadState: "loaded", ActiveState: "inactive", SubState: "dead", Type: "simple"},
	}
	acts := []manifests.ServiceAction{{Unit: "a.service", Action: manifests.ActionRestart}, {Unit: "b.service", Action: manifests.ActionRestart}}
	plain := Resolve(Request{Actions: acts}, units)
	if len(plain.Steps) != 0 {
		t.Fatalf("a change's plan acts on %+v, want nothing (neither runs)", plain.Steps)
	}
	op := Resolve(Request{Actions: acts, RestartFailed: true}, units)
	if len(op.Steps) != 1 || op.Steps[0].Unit != "a.service" || op.Steps[0].Action != VerbRestart {
		t.Fatalf("an operator's restart: %+v, want restart a.service only", op.Steps)
	}
	// Run clears the failed state (and its start limit) first.
	m := newMemory(units)
	if err := Run(context.Background(), m, op, nil); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.calls); got != "[reset-failed a.service restart a.service]" {
		t.Errorf("calls %s", got)
	}
	if u := m.units["a.service"]; u.ActiveState != "active" {
		t.Errorf("a.service is %s after the restart", u.ActiveState)
	}
}
