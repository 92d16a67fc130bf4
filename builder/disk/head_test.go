package disk_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/builder/disk"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// A disk provisioned from a repository joins the line at its head: its
// state partition's ledger names the regenerated image and the head
// overlay, and root A holds the folded tree.
func TestProvisionDiskAtHead(t *testing.T) {
	requireDiskTools(t)
	ctx := context.Background()
	dir := t.TempDir()
	key := testKey(t)
	res := buildDemo(t, filepath.Join(dir, "img"), builder.WithKey(key))
	repoDir := filepath.Join(dir, "repo")
	if _, err := repo.Init(context.Background(), repoDir, res.Image, key); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "web.conf")
	if err := os.WriteFile(src, []byte("listen 9999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := overlay.Create(ctx, repoDir, key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/demo/web.conf", Src: src}}}, overlay.CreateOptions{Version: "1.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := builder.HeadImage(ctx, repoDir, "", "", filepath.Join(dir, "work"), key)
	if err != nil {
		t.Fatal(err)
	}
	trust, _ := key.PublicKeySet()
	diskFile := filepath.Join(dir, "head.img")
	r, err := disk.Provision(ctx, img, diskFile, trust, disk.Options{NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	state := extract(t, diskFile, r.Layout.Part(disk.PartState))
	var l manifests.Ledger
	if err := manifests.Decode([]byte(run(t, "debugfs", "-R", "cat /"+manifests.LedgerPath, state)), &l); err != nil {
		t.Fatal(err)
	}
	e := l.Last()
	if e.Head.Version != "1.0.1" || e.Head.Digest != c.Digest || e.Image != "1.0.0" || e.TreeDigest != c.Manifest.TreeDigest {
		t.Fatalf("ledger on the state partition: %+v, want head 1.0.1 (%s) on image 1.0.0", e, c.Digest)
	}
	if got := mountedDigest(t, diskFile, r.Layout.Part(disk.PartRootA)); got != c.Manifest.TreeDigest {
		t.Fatalf("root A tree digest %s, want the head's %s", got, c.Manifest.TreeDigest)
	}
	// Without a key the head cannot be regenerated and signed.
	if _, err := builder.HeadImage(ctx, repoDir, "", "", filepath.Join(dir, "work2"), nil); err == nil {
		t.Fatal("HeadImage regenerated without a signing key")
	}
}
