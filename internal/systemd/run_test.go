package systemd

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
)

func TestRun(t *testing.T) {
	units := debianSnapshot()
	req := Request{Actions: planAll(manifests.ActionRestart, libc), Catalog: debianCatalog(), Changed: []string{libc}}
	r := Resolve(req, units)
	m := newMemory(units)
	var reported []Verb
	if err := Run(context.Background(), m, r, func(s Step) { reported = append(reported, s.Action) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"daemon-reexec ", "try-restart cron.service", "try-restart nginx.service", "try-restart rsyslog.service",
		"try-restart systemd-hostnamed.service", "try-restart systemd-journald.service", "try-restart systemd-udevd.service"}
	if !reflect.DeepEqual(m.calls, want) {
		t.Errorf("calls:\n got %q\nwant %q", m.calls, want)
	}
	if len(reported) != len(want) || reported[0] != VerbDaemonReexec {
		t.Errorf("reported %v", reported)
	}
	after, _ := m.Units(context.Background())
	for _, u := range after {
		restarted := u.MainPID > 1000
		wanted := u.ID == "cron.service" || u.ID == "nginx.service" || u.ID == "rsyslog.service" ||
			u.ID == "systemd-hostnamed.service" || u.ID == "systemd-journald.service" || u.ID == "systemd-udevd.service"
		if restarted != wanted {
			t.Errorf("%s restarted = %v, want %v", u.ID, restarted, wanted)
		}
	}
}

func TestRunDaemonOps(t *testing.T) {
	for _, tt := range []struct {
		r    Resolved
		want []string
	}{
		{Resolved{DaemonReload: true}, []string{"daemon-reload "}},
		{Resolved{DaemonReexec: true, DaemonReload: true, ReexecBecause: []string{"lib/systemd/systemd"}}, []string{"daemon-reexec "}},
		{Resolved{Steps: []Step{{Unit: "nginx.service", Action: VerbStop}}}, []string{"stop nginx.service"}},
		{Resolved{}, nil},
	} {
		m := newMemory(debianSnapshot())
		if err := Run(context.Background(), m, tt.r, nil); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.calls, tt.want) {
			t.Errorf("%+v: calls %q, want %q", tt.r, m.calls, tt.want)
		}
	}
}

func TestRunStopsAtFirstFailure(t *testing.T) {
	m := newMemory(debianSnapshot())
	boom := errors.New("unit nginx.service failed to start")
	m.fail["nginx.service"] = boom
	r := Resolved{DaemonReload: true, Steps: []Step{
		{Unit: "cron.service", Action: VerbTryRestart},
		{Unit: "nginx.service", Action: VerbTryRestart},
		{Unit: "rsyslog.service", Action: VerbTryRestart},
	}}
	var done []string
	err := Run(context.Background(), m, r, func(s Step) { done = append(done, string(s.Action)+" "+s.Unit) })
	if !errors.Is(err, ErrAction) || !errors.Is(err, boom) {
		t.Fatalf("err = %v, want ErrAction wrapping the controller's error", err)
	}
	want := []string{"daemon-reload ", "try-restart cron.service"}
	if !reflect.DeepEqual(done, want) {
		t.Errorf("reported %q, want %q", done, want)
	}
	if len(m.calls) != 3 {
		t.Errorf("calls %q: rsyslog.service must not be tried", m.calls)
	}
}

// slow blocks until its context ends.
type slow struct{}

func (slow) Do(ctx context.Context, verb Verb, unit string) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestRunStepTimeout(t *testing.T) {
	r := Resolved{Steps: []Step{{Unit: "nginx.service", Action: VerbTryRestart}}}
	err := Run(context.Background(), slow{}, r, nil, WithStepTimeout(10*time.Millisecond))
	if !errors.Is(err, ErrAction) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrAction and DeadlineExceeded", err)
	}
}
