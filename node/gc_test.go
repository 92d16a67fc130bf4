package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/internal/nodestate/dirfs"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/tests/fixture"
)

// gc keeps the undo data of the newest overlays only: rollback reaches
// those and then stops, saying why, with the node unchanged; data no
// overlay owns (a stray left behind) goes too.
func TestGCKeepsNewestRollbacks(t *testing.T) {
	f := fixture.New(t)
	var files []string
	for _, v := range []string{"1.0.1", "1.0.2", "1.0.3"} {
		files = append(files, f.Create(v, f.Change("/etc/app/app.conf", "port "+v+"\n")).Path)
	}
	root := f.Provision()
	if _, err := apply(root, files...); err != nil {
		t.Fatal(err)
	}
	undo := filepath.Join(root, manifests.StateDir, "undo")
	if err := os.MkdirAll(filepath.Join(undo, "9.9.9"), 0o700); err != nil {
		t.Fatal(err)
	}
	rep, err := nodetest.GC(context.Background(), root, 1, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rep.Undo, " "); got != "1.0.1 1.0.2 9.9.9" {
		t.Fatalf("gc pruned %q, want the undo data of 1.0.1, 1.0.2 and the stray 9.9.9", got)
	}
	if _, err := nodetest.Rollback(context.Background(), root, "", node.Options{}); err != nil {
		t.Fatalf("rolling back 1.0.3, whose undo data gc kept: %v", err)
	}
	before := fixture.Snap(t, root)
	_, err = nodetest.Rollback(context.Background(), root, "", node.Options{})
	if !errors.Is(err, dirfs.ErrUndoPruned) || !errors.Is(err, manifests.ErrRejected) || !strings.Contains(err.Error(), "1.0.2") || !strings.Contains(err.Error(), "gc") {
		t.Fatalf("rolling back 1.0.2 after gc: %v, want ErrUndoPruned naming 1.0.2 and gc", err)
	}
	fixture.AssertUnchanged(t, root, before)
	if _, err := nodetest.GC(context.Background(), root, -1, node.Options{}); !errors.Is(err, manifests.ErrInvalid) {
		t.Fatalf("gc --keep -1: %v", err)
	}
}
