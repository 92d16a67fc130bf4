package systemd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fake returns a Systemctl running testdata/fake-systemctl.sh in mode, and
// a function returning the argument vectors it was run with.
func fake(t *testing.T, mode string, opts ...Option) (*Systemctl, func() [][]string) {
	t.Helper()
	script, err := filepath.Abs("testdata/fake-systemctl.sh")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "argv")
	s := NewSystemctl(append([]Option{WithCommand("/bin/sh", script, log, mode)}, opts...)...)
	return s, func() [][]string {
		b, err := os.ReadFile(log)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		var out [][]string
		var cur []string
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if l == "--end--" {
				out = append(out, cur)
				cur = nil
				continue
			}
			cur = append(cur, l)
		}
		return out
	}
}

func TestSystemctlUnits(t *testing.T) {
	s, argv := fake(t, "list")
	units, err := s.Units(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Unit{
		{ID: "cron.service", Names: []string{"cron.service"}, MainPID: 10, ActiveState: "active"},
		{ID: "rsyslog.service", Names: []string{"rsyslog.service", "syslog.service"}, MainPID: 11, ActiveState: "active"},
	}
	if !reflect.DeepEqual(units, want) {
		t.Errorf("units:\n got %+v\nwant %+v", units, want)
	}
	wantArgv := [][]string{
		{"list-units", "--all", "--plain", "--no-legend", "--full", "--no-pager"},
		{"show", "--no-pager", "-p", showProperties, "--", "cron.service", "rsyslog.service"},
	}
	if got := argv(); !reflect.DeepEqual(got, wantArgv) {
		t.Errorf("argv:\n got %q\nwant %q", got, wantArgv)
	}
}

func TestSystemctlDo(t *testing.T) {
	tests := []struct {
		verb Verb
		unit string
		want []string
	}{
		{VerbTryRestart, "nginx.service", []string{"--no-pager", "--no-ask-password", "try-restart", "--", "nginx.service"}},
		{VerbTryReloadOrRestart, "getty@tty1.service", []string{"--no-pager", "--no-ask-password", "try-reload-or-restart", "--", "getty@tty1.service"}},
		{VerbStop, "a.service", []string{"--no-pager", "--no-ask-password", "stop", "--", "a.service"}},
		{VerbDaemonReload, "", []string{"--no-pager", "--no-ask-password", "daemon-reload"}},
		{VerbDaemonReexec, "", []string{"--no-pager", "--no-ask-password", "daemon-reexec"}},
	}
	for _, tt := range tests {
		s, argv := fake(t, "ok")
		if err := s.Do(context.Background(), tt.verb, tt.unit); err != nil {
			t.Fatalf("%s %s: %v", tt.verb, tt.unit, err)
		}
		if got := argv(); !reflect.DeepEqual(got, [][]string{tt.want}) {
			t.Errorf("%s %s: argv %q, want %q", tt.verb, tt.unit, got, tt.want)
		}
	}
}

func TestSystemctlRejects(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		call func(s *Systemctl) error
		want error
	}{
		{"option as unit", func(s *Systemctl) error { return s.Do(ctx, VerbTryRestart, "--force") }, ErrInvalidUnit},
		{"shell in unit", func(s *Systemctl) error { return s.Do(ctx, VerbStop, "a;reboot.service") }, ErrInvalidUnit},
		{"empty unit", func(s *Systemctl) error { return s.Do(ctx, VerbStop, "") }, ErrInvalidUnit},
		{"unit on daemon-reload", func(s *Systemctl) error { return s.Do(ctx, VerbDaemonReload, "a.service") }, ErrInvalidUnit},
		{"unknown verb", func(s *Systemctl) error { return s.Do(ctx, Verb("isolate"), "rescue.target") }, ErrUnknownVerb},
		{"show bad name", func(s *Systemctl) error { _, err := s.Show(ctx, "ok.service", "-H.service"); return err }, ErrInvalidUnit},
	} {
		s, argv := fake(t, "ok")
		if err := tt.call(s); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
		if got := argv(); got != nil {
			t.Errorf("%s: systemctl ran with %q", tt.name, got)
		}
	}
}

func TestSystemctlFailure(t *testing.T) {
	s, _ := fake(t, "fail")
	err := s.Do(context.Background(), VerbTryRestart, "nginx.service")
	if !errors.Is(err, ErrCommand) || !strings.Contains(err.Error(), "control process exited") || !strings.Contains(err.Error(), "nginx.service") {
		t.Errorf("err = %v, want ErrCommand naming the unit with systemctl's output", err)
	}
	err = Run(context.Background(), s, Resolved{Steps: []Step{{Unit: "nginx.service", Action: VerbTryRestart}}}, nil)
	if !errors.Is(err, ErrAction) || !errors.Is(err, ErrCommand) {
		t.Errorf("Run err = %v, want ErrAction wrapping ErrCommand", err)
	}
	if _, err := s.Units(context.Background()); !errors.Is(err, ErrCommand) {
		t.Errorf("Units err = %v, want ErrCommand", err)
	}
}

func TestSystemctlBadOutput(t *testing.T) {
	s, _ := fake(t, "garbage")
	if _, err := s.Show(context.Background(), "a.service"); !errors.Is(err, ErrParse) {
		t.Errorf("err = %v, want ErrParse", err)
	}
}

func TestSystemctlOutputLimit(t *testing.T) {
	s, _ := fake(t, "flood", WithOutputLimit(1<<20))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Show(ctx, "a.service"); !errors.Is(err, ErrOutputTooLarge) {
		t.Errorf("err = %v, want ErrOutputTooLarge", err)
	}
	if ctx.Err() != nil {
		t.Error("endless output was not cut short")
	}
}

func TestSystemctlContext(t *testing.T) {
	s, _ := fake(t, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Do(ctx, VerbTryRestart, "a.service"); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrCommand) {
		t.Errorf("err = %v, want ErrCommand and DeadlineExceeded", err)
	}
	if _, err := s.Units(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Units err = %v, want DeadlineExceeded", err)
	}
}
