package agent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/agent"
)

// FuzzLoadConfig reads arbitrary agent configurations (make fuzz runs
// it): never a panic, and what loads is valid.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte("repo: https://repo.example.net/\ninterval: 2m\njitter: 20%\nmax_backoff: 30m\n"))
	f.Add([]byte("repo: [\n"))
	f.Add([]byte("repo: x\ninterval: -1s\njitter: 300%\n"))
	f.Add([]byte("repo: oci://127.0.0.1:5000/a/b:latest\n&a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "agent.yaml")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := agent.LoadConfig(p, agent.Config{})
		if err != nil {
			return
		}
		if c.Repo == "" || c.Interval <= 0 || c.Jitter < 0 || c.Jitter > 100 || c.MaxBackoff < c.Interval {
			t.Fatalf("loaded an invalid configuration: %+v", c)
		}
	})
}
