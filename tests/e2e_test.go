package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEndToEnd runs the flow of scripts/demo.sh with the built binary and
// checks the regenerate equivalence: replaying the overlay chain on a node
// and provisioning a node from the regenerated image give the same tree,
// the one the last overlay's manifest promises, and the regenerated node
// keeps following the line.
func TestEndToEnd(t *testing.T) {
	s := &session{t: t, dir: t.TempDir()}
	restartLog := s.path("restarts.log")
	restartWith := "exec:echo {action} {unit} >> " + restartLog

	// A signing key and the demo image, built twice: byte-identical.
	s.ok("key", "generate", "--out", "demo")
	recipe := filepath.Join(demoDir, "recipe.yaml")
	var img struct {
		Image      string `json:"image"`
		Version    string `json:"version"`
		TreeDigest string `json:"tree_digest"`
	}
	s.okJSON(&img, "build-image", recipe, "--out", "images", "--key", "demo.key")
	if img.Image != "images/demo-1.0.0.squashfs" || img.Version != "1.0.0" {
		t.Fatalf("build-image wrote %s version %s, want images/demo-1.0.0.squashfs 1.0.0", img.Image, img.Version)
	}
	s.ok("build-image", recipe, "--out", "images-again", "--key", "demo.key")
	if !bytes.Equal(s.read("images/demo-1.0.0.squashfs"), s.read("images-again/demo-1.0.0.squashfs")) {
		t.Fatal("two builds of the demo recipe differ")
	}

	// A repository and three overlays.
	s.ok("repo", "init", "repo", "--image", "images/demo-1.0.0.squashfs", "--key", "demo.key")

	// 1.0.1: a config change that restarts demo-web.
	s.write("web.conf", "listen 8081\nroot /usr/share/demo/www\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.1", "--key", "demo.key",
		"--add", "/etc/demo/web.conf=web.conf")
	o101 := s.inspect("repo/overlays/demo-1.0.1.overlay.tar.zst")
	wantActions(t, o101, "restart demo-web.service")

	// 1.0.2: a reload-only drop-in and a file no service claims.
	s.write("brotli.conf", "brotli on\n")
	s.write("hostname", "demo-node-7\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.2", "--key", "demo.key",
		"--add", "/etc/demo/web.d/brotli.conf=brotli.conf", "--add", "/etc/hostname=hostname")
	o102 := s.inspect("repo/overlays/demo-1.0.2.overlay.tar.zst")
	wantActions(t, o102, "reload demo-web.service")
	if strings.Join(o102.Manifest.Unclaimed, ",") != "etc/hostname" {
		t.Errorf("1.0.2 unclaimed = %q, want [etc/hostname]", o102.Manifest.Unclaimed)
	}

	// 1.1.0: a changed unit file (daemon-reload, restart) and a deletion.
	unit, err := os.ReadFile(filepath.Join(demoDir, "rootfs/usr/lib/systemd/system/demo-worker.service"))
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(unit), "ExecStart=/usr/libexec/demo/worker\n", "ExecStart=/usr/libexec/demo/worker --batch 64\n", 1)
	if changed == string(unit) {
		t.Fatal("demo-worker.service has no ExecStart line to change")
	}
	s.write("tree/usr/lib/systemd/system/demo-worker.service", changed)
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.1.0", "--key", "demo.key",
		"--tree", "tree", "--delete", "/etc/demo/metrics.conf")
	o110 := s.inspect("repo/overlays/demo-1.1.0.overlay.tar.zst")
	wantActions(t, o110, "restart demo-metrics.service", "restart+daemon-reload demo-worker.service")
	if strings.Join(o110.Manifest.Deletes, ",") != "etc/demo/metrics.conf" {
		t.Errorf("1.1.0 deletes = %q, want [etc/demo/metrics.conf]", o110.Manifest.Deletes)
	}

	// Node A replays the chain from the repository.
	s.ok("provision", "--image", "images/demo-1.0.0.squashfs", "--root", "node-a")
	s.ok("apply-overlay", "--root", "node-a", "--repo", "repo", "--dry-run")
	if a := s.verify("node-a", "repo"); a.Head.Version != "1.0.0" {
		t.Fatalf("after a dry run node-a is at %s, want 1.0.0", a.Head.Version)
	}
	s.ok("apply-overlay", "--root", "node-a", "--repo", "repo", "--restart-with", restartWith)
	wantLog := "restart demo-web.service\nreload demo-web.service\ndaemon-reload \nrestart demo-metrics.service\nrestart demo-worker.service\n"
	if got := string(s.read("restarts.log")); got != wantLog {
		t.Errorf("restart commands run:\n%s\nwant:\n%s", got, wantLog)
	}
	a := s.verify("node-a", "repo")
	if a.Head.Version != "1.1.0" || a.Behind != 0 || len(a.Pending) != 0 {
		t.Errorf("node-a: head %s, behind %d, pending %v; want 1.1.0, 0, none", a.Head.Version, a.Behind, a.Pending)
	}
	s.ok("verify-sequence", "--repo", "repo", "--pub", "demo.pub")

	// Regenerate, and provision node B from the regenerated image.
	var regen struct {
		Image      string `json:"image"`
		TreeDigest string `json:"tree_digest"`
		Head       struct {
			Version string `json:"version"`
			Digest  string `json:"digest"`
		} `json:"head"`
	}
	s.okJSON(&regen, "regenerate", "--repo", "repo", "--out", "images", "--key", "demo.key")
	if regen.Image != "images/demo-1.0.0+head.1.1.0.squashfs" || regen.Head.Version != "1.1.0" || regen.Head.Digest != o110.Digest {
		t.Fatalf("regenerate wrote %s with head %s (%s), want images/demo-1.0.0+head.1.1.0.squashfs with head 1.1.0 (%s)",
			regen.Image, regen.Head.Version, regen.Head.Digest, o110.Digest)
	}
	s.ok("provision", "--image", regen.Image, "--root", "node-b")
	b := s.verify("node-b", "repo")
	if b.Head.Version != "1.1.0" || b.Head.Digest != o110.Digest || b.Behind != 0 {
		t.Errorf("node-b: head %s (%s), behind %d; want 1.1.0 (%s), 0", b.Head.Version, b.Head.Digest, b.Behind, o110.Digest)
	}

	// The regenerate equivalence.
	want := o110.Manifest.TreeDigest
	if a.TreeDigest != want || b.TreeDigest != want || regen.TreeDigest != want {
		t.Errorf("tree digests differ:\n node-a (replayed)     %s\n node-b (regenerated)  %s\n regenerated image     %s\n overlay 1.1.0 promises %s",
			a.TreeDigest, b.TreeDigest, regen.TreeDigest, want)
	}
	if img.TreeDigest == want {
		t.Errorf("the overlays did not change the tree digest %s", want)
	}

	// Node B keeps following the line: overlay 1.1.1, created after
	// regenerating, applies and verifies; node A gets the same tree.
	s.write("worker.conf", "interval 10s\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.1.1", "--key", "demo.key",
		"--add", "/etc/demo/worker.conf=worker.conf")
	o111 := s.inspect("repo/overlays/demo-1.1.1.overlay.tar.zst")
	if o111.Manifest.Parent.Version != "1.1.0" || o111.Manifest.Parent.Digest != o110.Digest {
		t.Errorf("1.1.1's parent is %s (%s), want 1.1.0 (%s)", o111.Manifest.Parent.Version, o111.Manifest.Parent.Digest, o110.Digest)
	}
	if b := s.verify("node-b", "repo"); b.Behind != 1 {
		t.Errorf("node-b is %d behind after 1.1.1 was created, want 1", b.Behind)
	}
	s.ok("apply-overlay", "--root", "node-b", "--repo", "repo", "--restart-with", "exec:true")
	s.ok("verify-sequence", "--root", "node-b", "--repo", "repo", "--files", "--strict")
	b = s.verify("node-b", "repo")
	if b.Head.Version != "1.1.1" || b.Head.Digest != o111.Digest || b.TreeDigest != o111.Manifest.TreeDigest {
		t.Errorf("node-b after 1.1.1: head %s (%s) tree %s; want 1.1.1 (%s) tree %s",
			b.Head.Version, b.Head.Digest, b.TreeDigest, o111.Digest, o111.Manifest.TreeDigest)
	}
	s.ok("apply-overlay", "--root", "node-a", "--repo", "repo", "--restart-with", "exec:true")
	if a := s.verify("node-a", "repo"); a.TreeDigest != b.TreeDigest {
		t.Errorf("after 1.1.1 node-a has tree %s, node-b %s", a.TreeDigest, b.TreeDigest)
	}
	if got, want := string(s.read("node-b/etc/demo/worker.conf")), "interval 10s\n"; got != want {
		t.Errorf("node-b worker.conf = %q, want %q", got, want)
	}
}

// session runs strata in a work directory.
type session struct {
	t   *testing.T
	dir string
}

func (s *session) path(rel string) string { return filepath.Join(s.dir, filepath.FromSlash(rel)) }

func (s *session) read(rel string) []byte {
	s.t.Helper()
	b, err := os.ReadFile(s.path(rel))
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func (s *session) write(rel, content string) {
	s.t.Helper()
	p := s.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// run runs strata and returns its output and exit status.
func (s *session) run(args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	cmd := exec.Command(strataBin, args...)
	cmd.Dir = s.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		s.t.Fatalf("strata %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// ok runs strata and fails the test unless it exits 0.
func (s *session) ok(args ...string) string {
	s.t.Helper()
	stdout, stderr, code := s.run(args...)
	if code != 0 {
		s.t.Fatalf("strata %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// okJSON runs strata --json and decodes its output into v.
func (s *session) okJSON(v any, args ...string) {
	s.t.Helper()
	out := s.ok(append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		s.t.Fatalf("strata --json %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

type ref struct {
	Version string `json:"version"`
	Digest  string `json:"digest"`
}

type serviceAction struct {
	Unit         string `json:"unit"`
	Action       string `json:"action"`
	DaemonReload bool   `json:"daemon_reload"`
}

type inspected struct {
	Digest   string `json:"digest"`
	Manifest struct {
		Version    string          `json:"version"`
		Parent     ref             `json:"parent"`
		Deletes    []string        `json:"deletes"`
		Services   []serviceAction `json:"services"`
		Unclaimed  []string        `json:"unclaimed"`
		TreeDigest string          `json:"tree_digest"`
	} `json:"manifest"`
}

// inspect verifies an overlay against demo.pub and returns its manifest.
func (s *session) inspect(file string) inspected {
	s.t.Helper()
	var o struct {
		inspected
		Verified bool `json:"verified"`
	}
	s.okJSON(&o, "overlay", "inspect", "--pub", "demo.pub", file)
	if !o.Verified {
		s.t.Fatalf("overlay inspect --pub %s: not verified", file)
	}
	return o.inspected
}

type audit struct {
	Head       ref               `json:"head"`
	Behind     int               `json:"behind"`
	Pending    []serviceAction   `json:"pending_restarts"`
	TreeDigest string            `json:"tree_digest"`
	Checked    bool              `json:"files_checked"`
	Findings   []json.RawMessage `json:"findings"`
}

// verify audits a node against the repository file by file and fails
// the test unless the audit passes.
func (s *session) verify(root, repo string) audit {
	s.t.Helper()
	var a audit
	s.okJSON(&a, "verify-sequence", "--root", root, "--repo", repo, "--files")
	if !a.Checked {
		s.t.Fatalf("verify-sequence --files on %s did not check files", root)
	}
	return a
}

// wantActions checks an overlay's restart plan, written as "ACTION UNIT"
// with "+daemon-reload" after the action when the unit needs one.
func wantActions(t *testing.T, o inspected, want ...string) {
	t.Helper()
	var got []string
	for _, a := range o.Manifest.Services {
		x := a.Action
		if a.DaemonReload {
			x += "+daemon-reload"
		}
		got = append(got, x+" "+a.Unit)
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("overlay %s services = %q, want %q", o.Manifest.Version, got, want)
	}
}
