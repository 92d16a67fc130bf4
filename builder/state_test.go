package builder_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
)

// The state of a node that boots an image: the ledger, the image
// signature and the overlayfs backend under var/lib/strata; an image with
// nowhere to mount /var or /run is refused and nothing is written.
func TestProvisionState(t *testing.T) {
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"etc", "var", "run"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc/motd"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "recipe.yaml")
	write := func(body string) {
		if err := os.WriteFile(recipe, []byte("line: st\nversion: 1.0.0\nepoch: 1700000000\nbase:\n  dir: rootfs\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	testenv.RequireTools(t, testenv.Squashfs)
	key := testKey(t)
	res, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "out"), builder.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	e, err := builder.ProvisionState(context.Background(), res.Image, state, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := nodestate.Node{Root: state}
	if b, err := n.Backend(); err != nil || b != nodestate.BackendOverlayfs {
		t.Fatalf("backend %q, %v; want overlayfs", b, err)
	}
	l, err := n.ReadLedger()
	if err != nil || l.Last().Hash != e.Hash || l.Last().Action != manifests.LedgerProvision {
		t.Fatalf("ledger %+v, %v", l, err)
	}
	if _, err := os.Stat(n.Path(manifests.ImageSigPath)); err != nil {
		t.Fatalf("image signature not kept: %v", err)
	}
	if _, err := builder.ProvisionState(context.Background(), res.Image, state, nil); err == nil {
		t.Fatal("provisioning over an existing ledger worked")
	}

	if err := os.RemoveAll(filepath.Join(rootfs, "run")); err != nil {
		t.Fatal(err)
	}
	res2, err := builder.Build(context.Background(), recipe, filepath.Join(dir, "out2"), builder.WithKey(key))
	if err != nil {
		t.Fatal(err)
	}
	state2 := filepath.Join(dir, "state2")
	if _, err := builder.ProvisionState(context.Background(), res2.Image, state2, nil); !errors.Is(err, builder.ErrRecipe) {
		t.Fatalf("an image without /run: %v, want a refusal", err)
	}
	if _, err := os.Lstat(state2); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused provisioning wrote %s: %v", state2, err)
	}
}
