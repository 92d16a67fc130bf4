package restarter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/systemd"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/restarter"
)

// fakeUnits answers Show from a script: each call takes the next state
// map (the last one repeats).
type fakeUnits struct {
	states []map[string]string // unit -> ActiveState (enabled); "disabled:" prefix: not enabled
	asked  [][]string
}

func (f *fakeUnits) Show(_ context.Context, names ...string) ([]systemd.Unit, error) {
	f.asked = append(f.asked, names)
	st := f.states[min(len(f.asked), len(f.states))-1]
	var out []systemd.Unit
	for _, n := range names {
		s, ok := st[n]
		if !ok {
			continue
		}
		u := systemd.Unit{ID: n, ActiveState: s, SubState: "x", UnitFileState: "enabled"}
		if rest, ok := strings.CutPrefix(s, "disabled:"); ok {
			u.ActiveState, u.UnitFileState = rest, "disabled"
		}
		out = append(out, u)
	}
	return out, nil
}

// The trial boot's health: a failed enabled service is unhealthy at once;
// one still starting is waited for; disabled units, templates and the
// caller's own unit are not looked at; an active unit's check must pass.
func TestBootHealth(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	cat := manifests.Catalog{Services: []manifests.Service{
		{Unit: "web.service", Check: []string{"/bin/true"}},
		{Unit: "job.service"},
		{Unit: "off.service"},
		{Unit: "getty@.service"},
		{Unit: "strata-upgrade-confirm.service"},
	}}
	up := map[string]string{"web.service": "active", "job.service": "inactive", "off.service": "disabled:failed", "strata-upgrade-confirm.service": "activating"}
	f := &fakeUnits{states: []map[string]string{up}}
	if err := restarter.BootHealth(f, "/", time.Minute, "strata-upgrade-confirm.service")(ctx, cat); err != nil {
		t.Fatalf("healthy node: %v", err)
	}
	for _, n := range f.asked[0] {
		if n == "getty@.service" || n == "strata-upgrade-confirm.service" {
			t.Errorf("asked systemd about %s", n)
		}
	}
	failed := map[string]string{"web.service": "active", "job.service": "failed"}
	err := restarter.BootHealth(&fakeUnits{states: []map[string]string{failed}}, "/", time.Minute)(ctx, cat)
	if err == nil || !strings.Contains(err.Error(), "job.service failed") {
		t.Fatalf("failed unit: %v", err)
	}
	starting := map[string]string{"web.service": "activating", "job.service": "inactive"}
	f = &fakeUnits{states: []map[string]string{starting, starting, up}}
	if err := restarter.BootHealth(f, "/", time.Minute, "strata-upgrade-confirm.service")(ctx, cat); err != nil || len(f.asked) != 3 {
		t.Fatalf("a unit that came up: %v after %d looks", err, len(f.asked))
	}
	err = restarter.BootHealth(&fakeUnits{states: []map[string]string{starting}}, "/", 0)(ctx, cat)
	if err == nil || !strings.Contains(err.Error(), "web.service is activating") {
		t.Fatalf("a unit that never came up: %v", err)
	}
	cat.Services[0].Check = []string{"/bin/false"}
	err = restarter.BootHealth(&fakeUnits{states: []map[string]string{up}}, "/", time.Minute, "strata-upgrade-confirm.service")(ctx, cat)
	if err == nil || !strings.Contains(err.Error(), "check of web.service") {
		t.Fatalf("failing check: %v", err)
	}
}
