package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 8, test 7: a bundle carries the signed chain from a node's head
// to a target onto a node with no network (the apply runs in a network
// namespace of its own: only loopback, down); what it does not carry, or
// carries tampered, is refused and the node is unchanged.
func TestBundleRoundTrip(t *testing.T) {
	s := &session{t: t, dir: t.TempDir()}
	s.ok("key", "generate", "--out", "k")
	s.ok("build-image", filepath.Join(demoDir, "recipe.yaml"), "--out", "images", "--key", "k.key")
	s.ok("repo", "init", "repo", "--image", "images/demo-1.0.0.squashfs", "--key", "k.key")
	for i, v := range []string{"1.0.1", "1.0.2", "1.0.3"} {
		s.write("web.conf", "listen 808"+string(rune('1'+i))+"\n")
		s.ok("overlay", "create", "--repo", "repo", "--version", v, "--key", "k.key", "--add", "/etc/demo/web.conf=web.conf")
	}
	s.ok("provision", "--image", "images/demo-1.0.0.squashfs", "--root", "node")
	var b struct {
		Overlays int    `json:"overlays"`
		To       string `json:"to"`
	}
	s.okJSON(&b, "bundle", "--repo", "repo", "--from", "1.0.0", "--to", "1.0.2", "--out", "b.tar")
	if b.Overlays != 2 || b.To != "1.0.2" {
		t.Fatalf("bundle: %+v, want 2 overlays through 1.0.2", b)
	}
	offline := func(args ...string) (string, int) {
		cmd := exec.Command("unshare", append([]string{"--net", strataBin}, args...)...)
		cmd.Dir = s.dir
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatalf("unshare: %v: %s", err, out)
		}
		return string(out), 0
	}
	// A bundle that starts after the node's head lacks what it needs.
	s.ok("bundle", "--repo", "repo", "--from", "1.0.2", "--out", "late.tar")
	s.write("node/var/lib/strata/lock", "") // a first run creates it; not a change
	before := digestTree(t, s.path("node"))
	if out, code := offline("apply-overlay", "--root", "node", "--bundle", "late.tar", "--restart-with", "none"); code != 3 || !strings.Contains(out, "does not carry overlay 1.0.1") || !strings.Contains(out, "missing: 1.0.1, 1.0.2 ") {
		t.Errorf("a bundle from 1.0.2 on a node at 1.0.0: exit %d, want 3 naming the missing 1.0.1 and 1.0.2: %s", code, out)
	}
	// A tampered bundle: one byte of an overlay flipped.
	raw, _ := os.ReadFile(s.path("b.tar"))
	bad := append([]byte{}, raw...)
	bad[len(bad)-2048] ^= 0xff
	s.write("bad.tar", string(bad))
	if out, code := offline("apply-overlay", "--root", "node", "--bundle", "bad.tar", "--restart-with", "none"); code != 3 {
		t.Errorf("a tampered bundle: exit %d, want 3: %s", code, out)
	}
	if after := digestTree(t, s.path("node")); after != before {
		bl, al := strings.Split(before, "\n"), strings.Split(after, "\n")
		t.Fatalf("a refused bundle changed the node:\nbefore: %d lines, after: %d\n%s", len(bl), len(al), diffLines(bl, al))
	}
	if out, code := offline("apply-overlay", "--root", "node", "--bundle", "b.tar", "--restart-with", "none"); code != 0 {
		t.Fatalf("applying the bundle with no network: exit %d: %s", code, out)
	}
	if a := s.verify("node", "repo"); a.Head.Version != "1.0.2" || a.Behind != 1 {
		t.Errorf("after the bundle: head %s, %d behind; want 1.0.2, 1 behind", a.Head.Version, a.Behind)
	}
	// The rest arrives by the next bundle, from the node's head.
	s.ok("bundle", "--repo", "repo", "--from", "1.0.2", "--out", "next.tar")
	if out, code := offline("apply-overlay", "--root", "node", "--bundle", "next.tar", "--restart-with", "none"); code != 0 {
		t.Fatalf("the next bundle: exit %d: %s", code, out)
	}
	if a := s.verify("node", "repo"); a.Head.Version != "1.0.3" {
		t.Errorf("head %s after the second bundle, want 1.0.3", a.Head.Version)
	}
	_, stderr, code := s.run("bundle", "--repo", "repo", "--from", "1.0.3", "--to", "1.0.1", "--out", "x.tar")
	if code != 3 || !strings.Contains(stderr, "not before") {
		t.Errorf("bundle --from after --to: exit %d: %s", code, stderr)
	}
}

// diffLines lists lines only one side has.
func diffLines(a, b []string) string {
	in := map[string]int{}
	for _, x := range a {
		in[x]--
	}
	for _, x := range b {
		in[x]++
	}
	var out []string
	for x, n := range in {
		if n < 0 {
			out = append(out, "- "+x)
		} else if n > 0 {
			out = append(out, "+ "+x)
		}
	}
	return strings.Join(out, "\n")
}
