//go:build debian

package live_test

import (
	"strings"
	"testing"
)

// Scenario 10, the summary: every scenario above checked that the units
// restarted or reloaded are exactly the expected ones (requireChanged
// compares systemd's InvocationID, MainPID and start time of every unit
// before and after); this prints what each acted on. It runs last (Go runs
// tests in file order, and this file sorts last).
func TestRestartPrecisionSummary(t *testing.T) {
	counts.Lock()
	defer counts.Unlock()
	total := 0
	for _, r := range counts.runs {
		t.Logf("%-32s %d: %s", r.name, len(r.acted), strings.Join(r.acted, ", "))
		total += len(r.acted)
	}
	t.Logf("%d scenarios, %d unit actions, every one expected, no other unit restarted", len(counts.runs), total)
}
