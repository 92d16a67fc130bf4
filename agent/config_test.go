package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/agent"
)

// The channel is stable unless the configuration (or --channel) says
// candidate; anything else is refused, and Go's names never show in the
// errors of a bad file.
func TestConfigChannel(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := agent.LoadConfig(write("repo: "+dir+"\n"), agent.Config{})
	if err != nil || c.Channel != "" {
		t.Fatalf("default channel: %+v %v", c, err)
	}
	c, err = agent.LoadConfig(write("repo: "+dir+"\nchannel: candidate\n"), agent.Config{Channel: "stable"})
	if err != nil || c.Channel != "candidate" {
		t.Fatalf("the file's channel wins: %+v %v", c, err)
	}
	if _, err := agent.LoadConfig(write("repo: "+dir+"\nchannel: beta\n"), agent.Config{}); err == nil || !strings.Contains(err.Error(), `channel: unknown channel (stable or candidate): "beta"`) {
		t.Fatalf("channel beta: %v", err)
	}
	if _, err := agent.LoadConfig(write("repo: "+dir+"\nchanel: candidate\n"), agent.Config{}); err == nil || !strings.Contains(err.Error(), `line 2: unknown key "chanel"`) || strings.Contains(err.Error(), "agent.Config") {
		t.Fatalf("a typo: %v", err)
	}
	if _, err := agent.LoadConfig(write("repo: "+dir+"\ninterval: [1]\n"), agent.Config{}); err == nil || strings.Contains(err.Error(), "agent.Duration") || strings.Contains(err.Error(), "time.") {
		t.Fatalf("a list for a duration: %v", err)
	}
}
