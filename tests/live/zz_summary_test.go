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
	for _, line := range counts.lines {
		_, acted, _ := strings.Cut(line, ": ")
		n := len(strings.Fields(strings.ReplaceAll(acted, "daemon-reload ", "")))
		t.Logf("%s", line)
		total += n
	}
	t.Logf("%d scenarios, %d unit actions, every one expected, no other unit restarted", len(counts.lines), total/2)
}
