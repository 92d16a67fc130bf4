package systemd

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
)

// memory is an in-memory service manager with systemctl's semantics for
// the verbs Run uses: try-restart and try-reload-or-restart do nothing to
// an inactive unit and give an active one a new main process; stop makes a
// unit inactive. Units whose ID is in fail fail every operation.
type memory struct {
	mu    sync.Mutex
	units map[string]*Unit
	fail  map[string]error
	pid   int
	calls []string
}

var (
	_ Manager    = (*memory)(nil)
	_ Controller = (*memory)(nil)
)

func newMemory(units []Unit) *memory {
	m := &memory{units: map[string]*Unit{}, fail: map[string]error{}, pid: 1000}
	for _, u := range units {
		u := u
		m.units[u.ID] = &u
	}
	return m
}

func (m *memory) Units(ctx context.Context) ([]Unit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Unit
	for _, u := range m.units {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (m *memory) Do(ctx context.Context, verb Verb, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		return fmt.Errorf("%s %s: no deadline", verb, unit)
	}
	m.calls = append(m.calls, string(verb)+" "+unit)
	if err := m.fail[unit]; err != nil {
		return err
	}
	var u *Unit
	for _, c := range m.units {
		if c.HasName(unit) {
			u = c
		}
	}
	switch verb {
	case VerbDaemonReexec, VerbDaemonReload:
		return nil
	case VerbStop:
		if u != nil {
			u.ActiveState, u.SubState, u.MainPID = "inactive", "dead", 0
		}
	case VerbTryRestart, VerbTryReloadOrRestart:
		if u != nil && u.Active() && u.MainPID > 0 && (verb == VerbTryRestart || !u.CanReload) {
			m.pid++
			u.MainPID = m.pid
		}
	case VerbResetFailed:
		if u != nil && u.ActiveState == "failed" {
			u.ActiveState, u.SubState = "inactive", "dead"
		}
	case VerbRestart:
		if u != nil {
			if u.ActiveState == "failed" {
				return fmt.Errorf("restart %s: the start limit was hit (reset-failed first)", unit)
			}
			m.pid++
			u.ActiveState, u.SubState, u.MainPID = "active", "running", m.pid
		}
	default:
		return fmt.Errorf("%s: %w", verb, ErrUnknownVerb)
	}
	return nil
}

// checkSemantics is the conformance check shared by the in-memory manager
// and a real systemd: try-restart restarts the active unit and leaves the
// inactive one alone, stop stops the active one.
func checkSemantics(t *testing.T, m Manager, c Controller, active, inactive string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStepTimeout)
	defer cancel()
	get := func(id string) Unit {
		t.Helper()
		units, err := m.Units(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range units {
			if u.ID == id {
				return u
			}
		}
		return Unit{ID: id, ActiveState: "inactive"}
	}
	before := get(active)
	if !before.Active() || before.MainPID == 0 {
		t.Fatalf("%s is not running: %+v", active, before)
	}
	if err := c.Do(ctx, VerbTryRestart, active); err != nil {
		t.Fatal(err)
	}
	if after := get(active); !after.Active() || after.MainPID == before.MainPID || after.MainPID == 0 {
		t.Errorf("try-restart %s: before %+v, after %+v", active, before, after)
	}
	if err := c.Do(ctx, VerbTryRestart, inactive); err != nil {
		t.Fatal(err)
	}
	if after := get(inactive); after.Active() {
		t.Errorf("try-restart started inactive %s: %+v", inactive, after)
	}
	if err := c.Do(ctx, VerbStop, active); err != nil {
		t.Fatal(err)
	}
	if after := get(active); after.Active() {
		t.Errorf("stop left %s active: %+v", active, after)
	}
}

func TestMemorySemantics(t *testing.T) {
	m := newMemory(debianSnapshot())
	checkSemantics(t, m, m, "nginx.service", "apt-daily-upgrade.service")
}
