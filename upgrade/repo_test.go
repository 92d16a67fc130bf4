package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/upgrade"
)

// A repository publishes a line's later images (strata repo add-image);
// upgrade --repo takes the newest, or with --compact the regenerated
// image through the node's head, checked against the index as it is
// copied. Bad publications are refused with the repository unchanged; a
// tampered image is refused with the disk unchanged.
func TestUpgradeDiskFromRepo(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	o := upgrade.Options{Repo: e.repo, DryRun: true}
	if _, err := upgrade.Disk(ctx, e.disk, o); !errors.Is(err, node.ErrUpgrade) || !strings.Contains(err.Error(), "no image newer than the node's 1.0.0 (upgrade images: none)") {
		t.Fatalf("upgrade from a repository without images: %v", err)
	}

	// Publishing: newer images go in, in order; anything else is refused.
	v110 := e.build(t, "up", "1.1.0", "2", e.key)
	v120 := e.build(t, "up", "1.2.0", "3", e.key)
	for _, img := range []string{v110, v120} {
		if _, err := repo.AddImage(ctx, e.repo, img, e.key); err != nil {
			t.Fatalf("adding %s: %v", img, err)
		}
	}
	index := readFile(t, filepath.Join(e.repo, repo.IndexFile))
	other := newKey(t)
	for _, c := range []struct {
		name, image string
		want        error
		says        string
	}{
		{"again", v110, repo.ErrSequence, "1.1.0 is not newer than 1.2.0"},
		{"older", e.build(t, "up", "0.9.0", "2", e.key), repo.ErrSequence, "not newer"},
		{"another line", e.build(t, "down", "2.0.0", "2", e.key), manifests.ErrInvalid, `no line "down"`},
		{"unsigned", e.build(t, "up", "1.3.0", "2", nil), manifests.ErrRejected, "not signed"},
		{"wrong key", e.build(t, "up", "1.3.0", "2", other), manifests.ErrRejected, "signature"},
		{"not a file", e.dir, nil, "not a regular file"},
	} {
		_, err := repo.AddImage(ctx, e.repo, c.image, e.key)
		if err == nil || c.want != nil && !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("adding %s: %v; want %v saying %q", c.name, err, c.want, c.says)
		}
	}
	if readFile(t, filepath.Join(e.repo, repo.IndexFile)) != index {
		t.Fatal("a refused image changed the index")
	}
	if a, err := overlay.VerifyRepo(ctx, e.repo, nil); err != nil || !a.OK() {
		t.Fatalf("audit of a repository with upgrade images: %+v %v", a, err)
	}

	rep, err := upgrade.Disk(ctx, e.disk, o)
	if err != nil || rep.To.Version != "1.2.0" || strings.Join(rep.Layers, " ") != "1.0.1 1.0.2" {
		t.Fatalf("upgrade --repo picks the newest image: %+v %v", rep, err)
	}

	// A tampered image is caught as it is copied; the audit names it.
	member := filepath.Join(e.repo, "images", "up-1.2.0.squashfs")
	good := readFile(t, member)
	if err := os.WriteFile(member, []byte(strings.Replace(good, "\x00", "\x01", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := e.sum(t)
	// A dry run plans from the manifest alone: the image is not fetched.
	if rep, err := upgrade.Disk(ctx, e.disk, o); err != nil || rep.To.Version != "1.2.0" {
		t.Fatalf("dry run with a tampered image file: %+v %v", rep, err)
	}
	o.DryRun = false
	if _, err := upgrade.Disk(ctx, e.disk, o); !errors.Is(err, repo.ErrTampered) {
		t.Fatalf("upgrade from a tampered image: %v, want ErrTampered", err)
	}
	if e.sum(t) != before {
		t.Fatal("a tampered image changed the disk")
	}
	if a, err := overlay.VerifyRepo(ctx, e.repo, nil); err != nil || a.OK() || !strings.Contains(fmt.Sprint(a.Findings), "upgrade image images/up-1.2.0.squashfs has sha256") {
		t.Fatalf("audit of a tampered upgrade image: %+v %v", a, err)
	}
	if err := os.WriteFile(member, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}

	// Compaction takes the regenerated image through the node's head;
	// one through another line's overlay is refused when published.
	o = upgrade.Options{Repo: e.repo, DryRun: true}
	o.Compact = true
	if _, err := upgrade.Disk(ctx, e.disk, o); !errors.Is(err, node.ErrUpgrade) || !strings.Contains(err.Error(), "no regenerated image through the node's head 1.0.2") {
		t.Fatalf("compaction without a regenerated image: %v", err)
	}
	fork := filepath.Join(e.dir, "fork")
	if _, err := repo.Init(context.Background(), fork, filepath.Join(e.dir, "recipe1", "out", "up-1.0.0.squashfs"), e.key); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(e.dir, "fork.conf")
	writeFile(t, src, "port 99\n")
	if _, err := overlay.Create(ctx, fork, e.key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app/app.conf", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"}); err != nil {
		t.Fatal(err)
	}
	forked, err := builder.Regenerate(ctx, fork, "", "", filepath.Join(e.dir, "regen-fork"), builder.WithKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.AddImage(ctx, e.repo, forked.Image, e.key); !errors.Is(err, repo.ErrSequence) || !strings.Contains(err.Error(), "not an overlay of the line") {
		t.Fatalf("adding another repository's regenerated image: %v", err)
	}
	head, err := builder.Regenerate(ctx, e.repo, "", "", filepath.Join(e.dir, "regen"), builder.WithKey(e.key))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := repo.AddImage(ctx, e.repo, head.Image, e.key)
	if err != nil || ref.Head == nil || ref.Head.Version != "1.0.2" || ref.Version != "1.0.0+head.1.0.2" {
		t.Fatalf("adding the regenerated image: %+v %v", ref, err)
	}
	if _, err := repo.AddImage(ctx, e.repo, head.Image, e.key); !errors.Is(err, repo.ErrExists) {
		t.Fatalf("adding the regenerated image twice: %v", err)
	}
	if rep, err = upgrade.Disk(ctx, e.disk, o); err != nil || !rep.Compact || rep.Head.Version != "1.0.2" || len(rep.Layers) != 0 {
		t.Fatalf("compaction from the repository: %+v %v", rep, err)
	}
	if a, err := overlay.VerifyRepo(ctx, e.repo, nil); err != nil || !a.OK() {
		t.Fatalf("audit with a regenerated image: %+v %v", a, err)
	}

	// The upgrade itself: the image is written, the copy removed.
	o = upgrade.Options{Repo: e.repo}
	if rep, err = upgrade.Disk(ctx, e.disk, o); err != nil || rep.To.Version != "1.2.0" || rep.Entry == nil {
		t.Fatalf("upgrade --repo: %+v %v", rep, err)
	}
	if left, _ := filepath.Glob(filepath.Join(os.Getenv("TMPDIR"), "strata-upgrade-*")); len(left) != 0 {
		t.Fatalf("the fetched image was left behind: %v", left)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
