package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// diskHash is the SHA-256 of the whole disk image.
func diskHash(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestRefusedDiskCommandsWriteNothing (issue 25, item 9): upgrade --disk
// to the image the disk already runs was refused (exit 3) but changed the
// state partition, mounted read-write and recovered before the checks.
// Every --disk command that refuses, every --dry-run and every audit now
// decides from read-only views: the disk image hashes the same after.
func TestRefusedDiskCommandsWriteNothing(t *testing.T) {
	s := &session{t: t, dir: t.TempDir()}
	for i, v := range []string{"1.0.0", "1.1.0"} {
		s.write(fmt.Sprintf("v%d/recipe.yaml", i+1), fmt.Sprintf(upgradeRecipe, v, i+1))
		s.write(fmt.Sprintf("v%d/rootfs/etc/app.conf", i+1), "v "+v+"\n")
	}
	s.ok("key", "generate", "--out", "k")
	s.ok("build-image", "v1/recipe.yaml", "--out", "images", "--key", "k.key")
	s.ok("build-image", "v2/recipe.yaml", "--out", "images", "--key", "k.key")
	s.ok("repo", "init", "repo", "--image", "images/up-1.0.0.squashfs", "--key", "k.key")
	s.write("app1.conf", "one\n")
	s.write("app2.conf", "two\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.1", "--key", "k.key", "--add", "/etc/app.conf=app1.conf")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.2", "--key", "k.key", "--add", "/etc/app.conf=app2.conf")
	s.ok("provision", "--image", "images/up-1.0.0.squashfs", "--disk", "node.img", "--node-id", "t")
	img := s.path("node.img")
	before := diskHash(t, img)
	for _, c := range []struct {
		code int
		args []string
		says string
	}{
		{3, []string{"upgrade", "--disk", "node.img", "--image", "images/up-1.0.0.squashfs"}, "1.0.0"},
		{0, []string{"upgrade", "--disk", "node.img", "--image", "images/up-1.1.0.squashfs", "--dry-run"}, "1.1.0"},
		{3, []string{"upgrade", "--disk", "node.img", "--cancel"}, "no upgrade is staged"},
		{3, []string{"apply-overlay", "--disk", "node.img", "repo/overlays/up-1.0.2.overlay.tar.zst"}, "1.0.1"},
		{0, []string{"apply-overlay", "--disk", "node.img", "--dry-run", "repo/overlays/up-1.0.1.overlay.tar.zst"}, "1.0.1"},
		{0, []string{"verify-sequence", "--disk", "node.img"}, ""},
	} {
		stdout, stderr, code := s.run(c.args...)
		if code != c.code || !strings.Contains(stdout+stderr, c.says) {
			t.Errorf("strata %s: exit %d, want %d naming %q:\n%s%s", strings.Join(c.args, " "), code, c.code, c.says, stdout, stderr)
		}
		if got := diskHash(t, img); got != before {
			t.Fatalf("strata %s changed the disk image", strings.Join(c.args, " "))
		}
	}
	// What is not refused still writes.
	s.ok("apply-overlay", "--disk", "node.img", "repo/overlays/up-1.0.1.overlay.tar.zst")
	if diskHash(t, img) == before {
		t.Error("an apply that holds did not change the disk")
	}
	out := s.ok("verify-sequence", "--disk", "node.img")
	if !strings.Contains(out, "1.0.1") {
		t.Errorf("the audit after the apply: %s", out)
	}
	// status --disk and rollback --disk (issue 25, item 10), the
	// rollback decided read-only first.
	applied := diskHash(t, img)
	if out := s.ok("status", "--disk", "node.img"); !strings.Contains(out, "1.0.1") {
		t.Errorf("status --disk after the apply: %s", out)
	}
	if _, stderr, code := s.run("rollback", "--disk", "node.img", "--to", "1.0.5"); code != 2 || !strings.Contains(stderr, "node node.img can go back to 1.0.0") {
		t.Errorf("rollback --disk --to a version the node never had: exit %d: %s", code, stderr)
	}
	if diskHash(t, img) != applied {
		t.Fatal("status --disk or a refused rollback --disk changed the disk image")
	}
	if out := s.ok("rollback", "--disk", "node.img"); !strings.Contains(out, "rolled back 1.0.1") {
		t.Errorf("rollback --disk: %s", out)
	}
	out = s.ok("status", "--disk", "node.img")
	if strings.Contains(out, "layers    1.0.1") || !strings.Contains(out, "head      1.0.0") {
		t.Errorf("status --disk after the rollback still names 1.0.1: %s", out)
	}
	// The rollback holds the node, as on a running one: its agent will
	// not apply 1.0.1 again when the disk boots.
	if !strings.Contains(out, "held      at 1.0.0") || !strings.Contains(out, "strata rollback --disk") {
		t.Errorf("status --disk after the rollback: not held:\n%s", out)
	}
}
