package restarter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/sandbox"
	"github.com/strata-dev/strata/internal/testenv"
)

// A service's check command runs in a sandbox rooted at the node's root:
// a program the host has but the node does not is not found, and one the
// node has runs.
func TestRunCommandInNodeRoot(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	if _, err := runCommand(ctx, []string{"/bin/true"}, time.Minute, "/"); err != nil {
		t.Fatalf("/bin/true on the running system: %v", err)
	}
	empty := t.TempDir()
	if _, err := runCommand(ctx, []string{"/bin/true"}, time.Minute, empty); !errors.Is(err, sandbox.ErrSandbox) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("/bin/true chrooted at a root without it: %v, want not found (the host's ran)", err)
	}
	if _, err := runCommand(ctx, []string{"true"}, time.Minute, "/"); err == nil {
		t.Fatal("a relative program ran")
	}
}
