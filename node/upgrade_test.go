package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/imagefile"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/fixture"
)

// stagedNode is a node with overlay 1.0.1 applied and an upgrade to an
// image 1.1.0 of its line staged (as strata upgrade leaves it, minus the
// disk), and that image's manifest.
func stagedNode(t *testing.T, f *fixture.Fixture, bootID string) (root string, next []byte) {
	t.Helper()
	root = f.Provision()
	// 1.0.1 adds a unit: it carries the line's catalog with it.
	ch := f.Change("/etc/app/app.conf", "port 81\n")
	ch.Adds = append(ch.Adds, overlay.Add{Dest: "/etc/systemd/system/ov.service", Src: f.HostFile("[Service]\nExecStart=/usr/bin/app\n")})
	c1 := f.Create("1.0.1", ch)
	if c1.Manifest.Catalog == nil {
		t.Fatal("overlay 1.0.1 carries no catalog")
	}
	if _, err := apply(root, c1.Path); err != nil {
		t.Fatal(err)
	}
	// 1.1.0 has a service of its own.
	recipe := strings.Replace(fixture.Recipe, "version: 1.0.0", "version: 1.1.0", 1)
	recipe = strings.Replace(recipe, "files:\n", "files:\n  - path: /usr/lib/systemd/system/extra.service\n    content: \"[Service]\\nExecStart=/usr/bin/app\\n\"\n", 1)
	img110 := fixture.Image(t, filepath.Join(f.Dir, "recipe-1.1.0"), recipe, fixture.Files, imagefile.Tar, builder.WithKey(f.Key))
	n := nodestate.Node{Root: root}
	for _, img := range []string{f.Image, img110} {
		raw, err := os.ReadFile(repo.ManifestPath(img))
		if err != nil {
			t.Fatal(err)
		}
		sig, err := os.ReadFile(repo.SigPath(repo.ManifestPath(img)))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.StoreImage(manifests.Digest(raw), raw, sig); err != nil {
			t.Fatal(err)
		}
		next = raw
	}
	l, err := n.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	last := l.Last()
	from := l.Entries[0]
	u := &manifests.StagedUpgrade{
		Schema: manifests.Schema, Kind: manifests.KindUpgrade,
		Record: manifests.LedgerEntry{Action: manifests.LedgerUpgrade, Line: "test", Version: "1.1.0", Digest: manifests.Digest(next),
			Image: "1.1.0", Head: last.Head, TreeDigest: last.TreeDigest, Slot: manifests.SlotB, Layers: []string{"1.0.1"}},
		From:  manifests.Ref{Version: from.Version, Digest: from.Digest},
		Entry: "strata-2-b.conf", BootID: bootID, Staged: "2026-12-01T10:00:00Z",
	}
	if err := n.Stage(u); err != nil {
		t.Fatal(err)
	}
	return root, next
}

const thisBoot = "0f5c8f3e-2d7a-4c1b-9a57-3c1d2e4f5a6b"

func healthy(context.Context, manifests.Catalog) error { return nil }

// A staged upgrade blocks changes; the boot that staged it settles
// nothing; a trial boot (the node's tree carries the new image) that is
// unhealthy commits nothing, a healthy one commits the upgrade record,
// which keeps the layers in effect and names the new image.
func TestUpgradeTrialConfirm(t *testing.T) {
	f := fixture.New(t)
	ctx := context.Background()
	root, next := stagedNode(t, f, thisBoot)
	c2 := f.Create("1.0.2", f.Change("/etc/app/app.conf", "port 82\n"))
	before := fixture.Snap(t, root)
	if _, err := apply(root, c2.Path); !errors.Is(err, node.ErrUpgradeStaged) {
		t.Fatalf("apply while staged: %v", err)
	}
	if _, err := nodetest.Rollback(ctx, root, "", node.Options{}); !errors.Is(err, node.ErrUpgradeStaged) {
		t.Fatalf("rollback while staged: %v", err)
	}
	fixture.AssertUnchanged(t, root, before)
	st, err := nodetest.Status(ctx, root)
	if err != nil || st.Upgrade == nil || st.Upgrade.State != "staged" || st.Upgrade.Image.Version != "1.1.0" {
		t.Fatalf("status while staged: %+v %v", st, err)
	}
	// The same boot: nothing to settle, nothing to confirm.
	if fb, err := nodetest.SettleUpgrade(ctx, root, thisBoot); err != nil || fb.Failed != nil {
		t.Fatalf("settle in the staging boot: %+v %v", fb, err)
	}
	if rep, err := nodetest.Confirm(ctx, root, healthy, node.Options{}); err != nil || rep.Confirmed || rep.Trial {
		t.Fatalf("confirm without a trial: %+v %v", rep, err)
	}
	fixture.AssertUnchanged(t, root, before)

	// The trial boot: the tree carries image 1.1.0.
	if err := os.WriteFile(filepath.Join(root, manifests.ImageManifestPath), next, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err = nodetest.Status(ctx, root)
	if err != nil || st.Upgrade == nil || st.Upgrade.State != "trial" || strings.Join(st.Layers, " ") != "1.0.1" {
		t.Fatalf("status on trial: %+v %v", st, err)
	}
	if _, err := apply(root, c2.Path); !errors.Is(err, node.ErrUpgradeStaged) {
		t.Fatalf("apply on a trial boot: %v", err)
	}
	sick := errors.New("nginx.service failed")
	_, err = nodetest.Confirm(ctx, root, func(context.Context, manifests.Catalog) error { return sick }, node.Options{})
	if !errors.Is(err, node.ErrUnhealthy) || !errors.Is(err, sick) {
		t.Fatalf("unhealthy trial: %v", err)
	}
	if _, err := (nodestate.Node{Root: root}).Staged(); err != nil {
		t.Fatal(err)
	}
	// The health check sees the new image's units and the layers'.
	var units []string
	rep, err := nodetest.Confirm(ctx, root, func(_ context.Context, cat manifests.Catalog) error {
		for _, s := range cat.Services {
			units = append(units, s.Unit)
		}
		return nil
	}, node.Options{})
	if !slices.Contains(units, "extra.service") || !slices.Contains(units, "ov.service") {
		t.Fatalf("health check's catalog: %v", units)
	}
	if err != nil || !rep.Confirmed || rep.Record.Action != manifests.LedgerUpgrade || rep.Record.Slot != manifests.SlotB {
		t.Fatalf("healthy trial: %+v %v", rep, err)
	}
	n := nodestate.Node{Root: root}
	if u, err := n.Staged(); u != nil || err != nil {
		t.Fatalf("staged upgrade left after the confirmation: %+v %v", u, err)
	}
	l, err := n.ReadLedger()
	if err != nil || l.Running().Version != "1.1.0" || joinedVersions(l.Applied()) != "1.0.1" {
		t.Fatalf("ledger after the confirmation: %+v %v", l.Last(), err)
	}
	// The stored manifests kept: the running image and the line's.
	ents, _ := os.ReadDir(n.ImageStore())
	if len(ents) != 4 {
		t.Fatalf("image store after the confirmation: %d files", len(ents))
	}
	if st, err := nodetest.Status(ctx, root); err != nil || st.Upgrade != nil || st.Running == nil || st.Running.Version != "1.1.0" || st.Slot != "b" {
		t.Fatalf("status after the confirmation: %+v %v", st, err)
	}
	// A confirmation that stopped between its commit and removing the
	// staged state: the next boot's settling removes it and records no
	// failure, and so does the next --confirm.
	u := stagedOf(t, root, next)
	for i, settle := range []func() error{
		func() error {
			fb, err := nodetest.SettleUpgrade(ctx, root, "1a2b3c4d-0000-4000-8000-000000000000")
			if err == nil && fb.Failed != nil {
				return fmt.Errorf("recorded as failed: %+v", fb.Failed)
			}
			return err
		},
		func() error {
			rep, err := nodetest.Confirm(ctx, root, healthy, node.Options{})
			if err == nil && !rep.Confirmed {
				return fmt.Errorf("not confirmed: %+v", rep)
			}
			return err
		},
	} {
		if err := n.Stage(u); err != nil {
			t.Fatal(err)
		}
		if err := settle(); err != nil {
			t.Fatalf("leftover staged state, way %d: %v", i, err)
		}
		if u, err := n.Staged(); u != nil || err != nil {
			t.Fatalf("leftover staged state, way %d, not removed: %v", i, err)
		}
	}
	if l, _ := n.ReadLedger(); l.Last().Action != manifests.LedgerUpgrade {
		t.Fatalf("ledger after the leftovers: %+v", l.Last())
	}
}

// stagedOf is the staged upgrade to image raw a confirmed upgrade's
// record describes.
func stagedOf(t *testing.T, root string, raw []byte) *manifests.StagedUpgrade {
	t.Helper()
	l, err := nodestate.Node{Root: root}.ReadLedger()
	if err != nil {
		t.Fatal(err)
	}
	rec := l.Last()
	rec.Seq, rec.Time, rec.Prev, rec.Hash = 0, "", "", ""
	return &manifests.StagedUpgrade{Schema: manifests.Schema, Kind: manifests.KindUpgrade, Record: rec,
		From: l.Entries[0].Head, Entry: "strata-2-b.conf", Staged: "2026-12-01T10:00:00Z"}
}

func joinedVersions(es []manifests.LedgerEntry) string {
	var vs []string
	for _, e := range es {
		vs = append(vs, e.Version)
	}
	return strings.Join(vs, " ")
}

// A boot of the old image after an upgrade was staged (a later boot, or
// any boot of one staged offline) records the failed upgrade and drops
// the staged state; the head does not move.
func TestUpgradeFallback(t *testing.T) {
	for name, staged := range map[string]string{"live": thisBoot, "offline": ""} {
		t.Run(name, func(t *testing.T) {
			f := fixture.New(t)
			ctx := context.Background()
			root, _ := stagedNode(t, f, staged)
			before := fixture.Snap(t, root)
			fb, err := nodetest.SettleUpgrade(ctx, root, "1a2b3c4d-0000-4000-8000-000000000000")
			if err != nil || fb.Failed == nil || fb.Failed.Slot != manifests.SlotB || fb.Failed.Version != "1.1.0" ||
				fb.Failed.Head.Version != "1.0.1" || !strings.Contains(fb.Failed.Error, "did not boot to health") {
				t.Fatalf("fallback: %+v %v", fb, err)
			}
			n := nodestate.Node{Root: root}
			if u, err := n.Staged(); u != nil || err != nil {
				t.Fatalf("staged upgrade left: %+v %v", u, err)
			}
			st, err := nodetest.Status(ctx, root)
			if err != nil || st.LastFailure == nil || st.LastFailure.Slot != "b" || st.Head.Version != "1.0.1" || st.Upgrade != nil {
				t.Fatalf("status after the fallback: %+v %v", st, err)
			}
			if fixture.Snap(t, root).Digest != before.Digest {
				t.Fatal("the fallback changed the tree")
			}
			// Settled once: a second run finds nothing.
			if fb, err := nodetest.SettleUpgrade(ctx, root, "1a2b3c4d-0000-4000-8000-000000000000"); err != nil || fb.Failed != nil {
				t.Fatalf("second settle: %+v %v", fb, err)
			}
		})
	}
}

// Planted upgrade state is refused, not followed: a symlink, garbage, an
// entry name that is a path.
func TestUpgradeHostileStaged(t *testing.T) {
	f := fixture.New(t)
	root := f.Provision()
	p := filepath.Join(root, manifests.UpgradePath)
	target := filepath.Join(t.TempDir(), "upgrade.json")
	if err := os.WriteFile(target, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func() error{
		"symlink": func() error { return os.Symlink(target, p) },
		"garbage": func() error { return os.WriteFile(p, []byte("\x00\x01not json"), 0o644) },
		"fifo":    func() error { return unix.Mkfifo(p, 0o644) },
		"entry path": func() error {
			return os.WriteFile(p, []byte(`{"schema":1,"kind":"upgrade","record":{"action":"upgrade"},"entry":"../../x"}`), 0o644)
		},
	} {
		os.Remove(p)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		if _, err := (nodestate.Node{Root: root}).Staged(); err == nil {
			t.Errorf("%s: planted upgrade.json accepted", name)
		}
		if _, err := nodetest.Status(context.Background(), root); err == nil {
			t.Errorf("%s: status accepted the planted upgrade.json", name)
		}
	}
}

// The initramfs's note of a refused root joins the failed record, once,
// cleaned of control characters; a planted note that is not a file is
// reported in the record and does not stop the fallback.
func TestUpgradeFallbackWithRefusal(t *testing.T) {
	for name, plant := range map[string]struct {
		write func(p string) error
		want  string
	}{
		"note": {func(p string) error {
			return os.WriteFile(p, []byte("root b (/dev/vda3): device-mapper: verity: 254:0: data block 0 is corrupted\n\x1b[31m\n"), 0o644)
		}, "; its boot was refused: root b (/dev/vda3): device-mapper: verity: 254:0: data block 0 is corrupted [31m"},
		"fifo": {func(p string) error { return unix.Mkfifo(p, 0o644) }, "; its boot refusal note could not be read: "},
	} {
		t.Run(name, func(t *testing.T) {
			f := fixture.New(t)
			root, _ := stagedNode(t, f, "")
			p := filepath.Join(root, manifests.BootRefusalPath)
			if err := plant.write(p); err != nil {
				t.Fatal(err)
			}
			fb, err := nodetest.SettleUpgrade(context.Background(), root, "1a2b3c4d-0000-4000-8000-000000000000")
			if err != nil || fb.Failed == nil || !strings.Contains(fb.Failed.Error, plant.want) {
				t.Fatalf("fallback: %+v %v, want the error to hold %q", fb, err, plant.want)
			}
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the note was not taken: %v", err)
			}
		})
	}
}
