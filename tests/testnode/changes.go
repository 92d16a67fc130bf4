package testnode

import (
	"fmt"
	"maps"
	"slices"
)

// Change is a unit whose state differs between two snapshots of Units.
// A side where the unit was not loaded is the zero UnitState.
type Change struct {
	Unit          string
	Before, After UnitState
}

// String says what changed, for test failures.
func (c Change) String() string {
	return fmt.Sprintf("%s: %s", c.Unit, describe(c.Before, c.After))
}

func describe(a, b UnitState) string {
	f := func(u UnitState) string {
		if u.Name == "" {
			return "not loaded"
		}
		return fmt.Sprintf("%s/%s pid %d invocation %.8s started %d", u.ActiveState, u.SubState, u.MainPID, u.InvocationID, u.ExecMainStartTimestampMonotonic)
	}
	return f(a) + " -> " + f(b)
}

// Changes compares two snapshots of Units and returns, sorted by unit,
// every unit that was started, restarted or stopped in between: its
// InvocationID, MainPID, main start time or ActiveState differs. A reload
// changes none of them. A unit loaded on one side only counts when it was
// running or had run on that side (an idle unit being loaded or garbage
// collected is no change).
func Changes(before, after map[string]UnitState) []Change {
	var out []Change
	names := slices.Sorted(maps.Keys(before))
	for name := range after {
		if _, ok := before[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		a, inA := before[name]
		b, inB := after[name]
		var changed bool
		switch {
		case inA && inB:
			changed = a.InvocationID != b.InvocationID || a.MainPID != b.MainPID ||
				a.ExecMainStartTimestampMonotonic != b.ExecMainStartTimestampMonotonic || a.ActiveState != b.ActiveState
		case inA:
			changed = ran(a)
		default:
			changed = ran(b)
		}
		if changed {
			out = append(out, Change{Unit: name, Before: a, After: b})
		}
	}
	return out
}

// ran tells whether a unit is or was running in this boot.
func ran(u UnitState) bool {
	return u.InvocationID != "" || u.MainPID != 0 || (u.ActiveState != "inactive" && u.ActiveState != "")
}

// Changed is the names of the units Changes returns.
func Changed(before, after map[string]UnitState) []string {
	var names []string
	for _, c := range Changes(before, after) {
		names = append(names, c.Unit)
	}
	return names
}
