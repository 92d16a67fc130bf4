package testnode_test

import (
	"slices"
	"testing"

	"github.com/strata-dev/strata/tests/testnode"
)

func TestChanged(t *testing.T) {
	run := func(name string, pid int, inv string, start uint64) testnode.UnitState {
		return testnode.UnitState{Name: name, ActiveState: "active", SubState: "running", MainPID: pid, InvocationID: inv, ExecMainStartTimestampMonotonic: start}
	}
	idle := testnode.UnitState{Name: "idle.service", ActiveState: "inactive", SubState: "dead"}
	before := map[string]testnode.UnitState{
		"nginx.service":   run("nginx.service", 10, "a", 100),
		"rsyslog.service": run("rsyslog.service", 11, "b", 101),
		"stopped.service": run("stopped.service", 12, "c", 102),
		"gone.service":    run("gone.service", 13, "d", 103),
		"idle.service":    idle,
		"samepid.service": run("samepid.service", 14, "e", 104),
	}
	after := map[string]testnode.UnitState{
		"nginx.service":   run("nginx.service", 10, "a", 100),   // reloaded: same
		"rsyslog.service": run("rsyslog.service", 20, "f", 200), // restarted
		"stopped.service": {Name: "stopped.service", ActiveState: "inactive", SubState: "dead", InvocationID: "c"},
		"new.service":     run("new.service", 21, "g", 201),     // started
		"samepid.service": run("samepid.service", 14, "h", 104), // new invocation only
		// gone.service: stopped and unloaded; idle.service: garbage collected
	}
	want := []string{"gone.service", "new.service", "rsyslog.service", "samepid.service", "stopped.service"}
	if got := testnode.Changed(before, after); !slices.Equal(got, want) {
		t.Errorf("Changed = %v, want %v", got, want)
	}
	if got := testnode.Changed(before, before); len(got) != 0 {
		t.Errorf("Changed(s, s) = %v, want nothing", got)
	}
	for _, c := range testnode.Changes(before, after) {
		if c.String() == "" {
			t.Errorf("empty description of %s", c.Unit)
		}
	}
}
