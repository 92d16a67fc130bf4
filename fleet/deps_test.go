package fleet_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The fleet client reads what agents serve through package schema: it
// links none of the agent (its metrics, its HTTP server).
func TestFleetDoesNotLinkTheAgent(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/strata-dev/strata/agent" || strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("package fleet depends on %s", p)
		}
	}
}
