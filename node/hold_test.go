package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/tests/fixture"
)

// A held node does not move (issue 22): apply refuses, naming the hold
// and the way out, and changes nothing; status shows the hold; released,
// it applies. A planted hold file that is not one is refused, not obeyed
// or ignored.
func TestHeldNodeDoesNotMove(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	c := f.Create("1.0.1", f.Change("/etc/motd", "v1\n"))
	root := f.Provision()
	h, err := node.Open(root, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Hold(ctx, " "); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("a blank reason: %v, want manifests.ErrInvalid", err)
	}
	hold, err := h.Hold(ctx, "waiting for the vendor")
	if err != nil {
		t.Fatal(err)
	}
	before := fixture.Snap(t, root)
	_, err = apply(root, c.Path)
	fixture.ErrIs(t, err, node.ErrHeld, "held at 1.0.0", "waiting for the vendor", "strata release --root "+root)
	fixture.AssertUnchanged(t, root, before)
	st, err := nodetest.Status(ctx, root)
	if err != nil || st.Held == nil || *st.Held != *hold {
		t.Fatalf("status held %+v (%v), want %+v", st.Held, err, hold)
	}
	released, err := h.Release(ctx)
	if err != nil || released == nil || released.Reason != "waiting for the vendor" {
		t.Fatalf("release: %+v, %v", released, err)
	}
	if again, err := h.Release(ctx); again != nil || err != nil {
		t.Errorf("releasing a node not held: %+v, %v; want nothing", again, err)
	}
	fixture.MustApply(t, root, c.Path)

	// Planted: a link, and junk.
	p := filepath.Join(root, manifests.HoldPath)
	if err := os.Symlink("/etc/hostname", p); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Status(ctx, root); err == nil {
		t.Error("status took a hold file that is a link")
	}
	os.Remove(p)
	if err := os.WriteFile(p, []byte(`{"schema":1,"kind":"hold"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := nodetest.Status(ctx, root); !errors.Is(err, manifests.ErrInvalid) {
		t.Errorf("status with a junk hold: %v, want manifests.ErrInvalid", err)
	}
}
