package systemd

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// TestSystemdNode runs Systemctl, Resolve and Run against a real systemd
// 252 booted in a namespace: the libc case restarts nginx and rsyslog
// (through its alias syslog.service) once each, re-executes PID 1, and
// leaves dbus, logind, gettys and oneshots alone.
func TestSystemdNode(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a systemd node; not with -short")
	}
	s, inNode := bootNode(t, nodeRoot(t))
	// Two plain services of known shape: a daemon and an active oneshot.
	inNode("systemd-run", "--unit=strata-sleep.service", "sleep", "infinity")
	inNode("systemd-run", "--unit=strata-once.service", "-p", "Type=oneshot", "-p", "RemainAfterExit=yes", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	units, err := s.Units(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := func(units []Unit, id string) Unit {
		for _, u := range units {
			if u.ID == id {
				return u
			}
		}
		t.Fatalf("%s not loaded", id)
		return Unit{}
	}
	rs := byID(units, "rsyslog.service")
	if !rs.HasName("syslog.service") || !rs.Active() || rs.MainPID == 0 {
		t.Fatalf("rsyslog.service: %+v, want active with alias syslog.service", rs)
	}
	_, haveNginx := newSnapshot(units).byName["nginx.service"]

	plan := []string{
		"rsyslog.service", "syslog.service", "dbus.service", "systemd-logind.service", "getty@.service",
		"serial-getty@.service", "console-getty.service", "apt-daily-upgrade.service", "systemd-halt.service",
		"systemd-kexec.service", "rescue.service", "emergency.service", "initrd-switch-root.service",
		"systemd-sysctl.service", "user@.service", "strata-sleep.service", "strata-once.service",
	}
	if haveNginx {
		plan = append(plan, "nginx.service")
	}
	var req Request
	for _, u := range plan {
		req.Actions = append(req.Actions, manifests.ServiceAction{Unit: u, Action: manifests.ActionRestart, Because: []string{libc}})
		req.Catalog.Services = append(req.Catalog.Services, manifests.Service{Unit: u, Libraries: []string{libc}})
	}
	req.Changed = []string{libc}
	r := Resolve(req, units)
	checkResolved(t, req, units, r)

	var want []stepBrief
	if haveNginx {
		want = append(want, stepBrief{"nginx.service", VerbTryRestart, "nginx.service"})
	}
	want = append(want, stepBrief{"rsyslog.service", VerbTryRestart, "rsyslog.service"},
		stepBrief{"strata-sleep.service", VerbTryRestart, "strata-sleep.service"})
	if got := stepBriefs(r.Steps); !reflect.DeepEqual(got, want) {
		t.Errorf("steps %+v, want %+v", got, want)
	}
	deferred := map[string]Reason{}
	for _, d := range r.Deferred {
		deferred[d.Unit] = d.Reason
	}
	active := map[string]bool{}
	for _, u := range units {
		active[u.ID] = u.Active()
	}
	for _, id := range []string{"dbus.service", "systemd-logind.service", "getty@tty1.service", "console-getty.service"} {
		if active[id] && deferred[id] != ReasonNeverRestart {
			t.Errorf("%s not deferred: %+v", id, r.Deferred)
		}
	}
	skipped := map[string]Reason{}
	for _, h := range r.Skipped {
		skipped[h.Unit] = h.Reason
	}
	// Units systemd has not loaded (it garbage-collects inactive ones) are
	// not-loaded rather than inactive.
	for id, reasons := range map[string][]Reason{
		"apt-daily-upgrade.service":  {ReasonInactive, ReasonNotLoaded},
		"systemd-halt.service":       {ReasonInactive, ReasonNotLoaded},
		"systemd-kexec.service":      {ReasonInactive, ReasonNotLoaded},
		"rescue.service":             {ReasonInactive, ReasonNotLoaded},
		"emergency.service":          {ReasonInactive, ReasonNotLoaded},
		"initrd-switch-root.service": {ReasonInactive, ReasonNotLoaded},
		"systemd-sysctl.service":     {ReasonNoProcess},
		"strata-once.service":        {ReasonNoProcess},
		"serial-getty@.service":      {ReasonNoInstances},
		"user@.service":              {ReasonNoInstances},
		"syslog.service":             {ReasonAlias},
	} {
		if got := skipped[id]; got != reasons[0] && (len(reasons) < 2 || got != reasons[1]) {
			t.Errorf("%s skipped as %q, want one of %q", id, got, reasons)
		}
	}
	if !r.DaemonReexec {
		t.Error("libc changed, but no daemon-reexec")
	}

	var done []Step
	if err := Run(ctx, s, r, func(st Step) { done = append(done, st) }); err != nil {
		t.Fatal(err)
	}
	if len(done) != len(r.Steps)+1 {
		t.Errorf("reported %+v", done)
	}
	after, err := s.Units(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Gettys respawn on their own in a container; these must not change.
	for _, id := range []string{"nginx.service", "rsyslog.service", "strata-sleep.service", "dbus.service", "systemd-logind.service", "systemd-journald.service"} {
		u, ok := newSnapshot(units).byName[id]
		if !ok || !u.Active() {
			continue
		}
		a := byID(after, id)
		restarted := a.MainPID != u.MainPID
		wanted := id == "rsyslog.service" || id == "nginx.service" || id == "strata-sleep.service"
		if restarted != wanted || !a.Active() {
			t.Errorf("%s: MainPID %d -> %d, active %v; want restarted %v", id, u.MainPID, a.MainPID, a.Active(), wanted)
		}
	}
	for _, id := range []string{"apt-daily-upgrade.service", "rescue.service", "systemd-halt.service", "emergency.service"} {
		if u, ok := newSnapshot(after).byName[id]; ok && u.Active() {
			t.Errorf("%s was started: %+v", id, u)
		}
	}
	if state, err := s.output(ctx, "is-system-running"); err != nil && state == "" {
		t.Errorf("after the run: is-system-running: %v", err)
	}

	// A failing operation fails Run with ErrAction and systemctl's output.
	err = Run(ctx, s, Resolved{Steps: []Step{{Unit: "nope.service", Action: VerbTryReloadOrRestart}, {Unit: "rsyslog.service", Action: VerbStop}}}, nil)
	if !errors.Is(err, ErrAction) || !strings.Contains(err.Error(), "nope.service") {
		t.Errorf("try-reload-or-restart of an unknown unit: %v, want ErrAction naming it", err)
	}
	t.Logf("unknown unit: %v", err)
	if u := byID(after, "strata-once.service"); !u.Active() || u.SubState != "exited" {
		t.Errorf("strata-once.service: %+v, want active (exited)", u)
	}
	checkSemantics(t, s, s, "strata-sleep.service", "apt-daily-upgrade.service")
}
