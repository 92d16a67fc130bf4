package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-dev/strata/manifests"
)

// TestKeyRotationCLI is the key rotation of docs/security.md from the
// command line: the line's key A is replaced by B, a node that missed the
// rotation catches up in order, A can no longer sign, an auditor who
// knows only A follows the rotation, and a regenerated image trusts B.
func TestKeyRotationCLI(t *testing.T) {
	s := &session{t: t, dir: t.TempDir()}
	var a, b struct {
		ID string `json:"id"`
	}
	s.okJSON(&a, "key", "generate", "--out", "a")
	s.okJSON(&b, "key", "generate", "--out", "b")
	if got := keyID(t, s.path("a.pub")); got != a.ID {
		t.Fatalf("key generate says id %s, the .pub file holds %s", a.ID, got)
	}
	s.ok("build-image", filepath.Join(demoDir, "recipe.yaml"), "--out", "images", "--key", "a.key")
	s.ok("repo", "init", "repo", "--image", "images/demo-1.0.0.squashfs", "--key", "a.key")
	s.write("web.conf", "listen 8081\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.1", "--key", "a.key", "--add", "/etc/demo/web.conf=web.conf")
	s.ok("provision", "--image", "images/demo-1.0.0.squashfs", "--root", "node")

	// Revoking the key that signs the index needs the new one for it.
	_, stderr, code := s.run("key", "rotate", "--repo", "repo", "--key", "a.key", "--add", "b.pub", "--revoke", a.ID)
	if code != 2 || !strings.Contains(stderr, "--index-key") {
		t.Fatalf("rotation revoking --key without --index-key: exit %d, %s", code, stderr)
	}
	var rot struct {
		Path     string `json:"path"`
		Manifest struct {
			Version string `json:"version"`
			Keys    struct {
				Add    []string `json:"add"`
				Revoke []string `json:"revoke"`
			} `json:"keys"`
		} `json:"manifest"`
	}
	s.okJSON(&rot, "key", "rotate", "--repo", "repo", "--key", "a.key", "--add", "b.pub", "--revoke", a.ID, "--index-key", "b.key")
	if rot.Manifest.Version != "1.0.2" || len(rot.Manifest.Keys.Add) != 1 || strings.Join(rot.Manifest.Keys.Revoke, ",") != a.ID {
		t.Fatalf("rotation: %+v", rot)
	}
	out := s.ok("overlay", "inspect", "--pub", "a.pub", rot.Path)
	if !strings.Contains(out, "trust   "+b.ID) || !strings.Contains(out, "revoke  "+a.ID) {
		t.Errorf("overlay inspect does not show the rotation:\n%s", out)
	}

	// A signs no more; B does.
	s.write("web2.conf", "listen 8082\n")
	_, stderr, code = s.run("overlay", "create", "--repo", "repo", "--version", "1.0.3", "--key", "a.key", "--add", "/etc/demo/web.conf=web2.conf")
	if code != 3 || !strings.Contains(stderr, "not one the line trusts") {
		t.Fatalf("overlay create with the revoked key: exit %d, %s", code, stderr)
	}
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.3", "--key", "b.key", "--add", "/etc/demo/web.conf=web2.conf")

	// The node catches up through the rotation and trusts B only.
	s.ok("apply-overlay", "--root", "node", "--repo", "repo", "--restart-with", "none")
	keys, err := os.ReadDir(s.path("node/" + manifests.KeysDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].Name() != b.ID+".pub" {
		t.Errorf("node key files %v, want only %s.pub", keys, b.ID)
	}
	if a := s.verify("node", "repo"); a.Head.Version != "1.0.3" {
		t.Errorf("node head %s, want 1.0.3", a.Head.Version)
	}
	s.ok("verify-sequence", "--repo", "repo", "--pub", "b.pub", "--history-pub", "a.pub")
	s.ok("verify-sequence", "--root", "node", "--repo", "repo", "--pub", "b.pub", "--history-pub", "a.pub", "--files")
	if _, _, code := s.run("verify-sequence", "--repo", "repo", "--pub", "a.pub"); code != 3 {
		t.Errorf("repository audit trusting the revoked key for the index: exit %d, want 3", code)
	}

	// A regenerated head trusts B; provisioned, it keeps following.
	_, stderr, code = s.run("regenerate", "--repo", "repo", "--key", "b.key", "--out", "regen")
	if code != 3 || !strings.Contains(stderr, a.ID) {
		t.Errorf("regenerate without the image's key: exit %d, %s", code, stderr)
	}
	var img struct {
		Image string `json:"image"`
	}
	s.okJSON(&img, "regenerate", "--repo", "repo", "--key", "b.key", "--history-pub", "a.pub", "--out", "regen")
	s.ok("provision", "--image", img.Image, "--root", "fresh", "--pub", "b.pub")
	s.write("web3.conf", "listen 8083\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.4", "--key", "b.key", "--add", "/etc/demo/web.conf=web3.conf")
	s.ok("apply-overlay", "--root", "fresh", "--repo", "repo", "--restart-with", "none")
	s.verify("fresh", "repo")
}

// keyID returns the id of a .pub file's key.
func keyID(t *testing.T, pub string) string {
	t.Helper()
	b, err := os.ReadFile(pub)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	id, err := manifests.KeyID(lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	return id
}
