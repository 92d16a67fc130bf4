package overlay

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// A service's check command runs inside the node's root: a program the
// host has but the node does not is not found, and one the node has runs.
func TestRunCommandChroots(t *testing.T) {
	ctx := context.Background()
	if _, err := runCommand(ctx, []string{"/bin/true"}, time.Minute, "/"); err != nil {
		t.Fatalf("/bin/true on the running system: %v", err)
	}
	empty := t.TempDir()
	if _, err := runCommand(ctx, []string{"/bin/true"}, time.Minute, empty); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("/bin/true chrooted at a root without it: %v, want not found (the host's ran)", err)
	}
	if _, err := runCommand(ctx, []string{"true"}, time.Minute, "/"); err == nil {
		t.Fatal("a relative program ran")
	}
}
