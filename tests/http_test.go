package tests

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/registrytest"
)

// startServe runs `strata serve DIR --listen 127.0.0.1:0` and returns its
// URL; the server is stopped with SIGTERM when the test ends, and must
// then exit 0.
func startServe(t *testing.T, s *session, dir string) string {
	t.Helper()
	cmd := exec.Command(strataBin, "serve", dir, "--listen", "127.0.0.1:0")
	cmd.Dir = s.dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`on (http://[0-9.:]+/)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("strata serve after SIGTERM: %v, want exit 0", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("strata serve did not stop on SIGTERM")
		}
	})
	select {
	case u := <-urls:
		return u
	case <-time.After(20 * time.Second):
		t.Fatal("strata serve did not say where it listens")
		return ""
	}
}

// A node follows a repository served over HTTP by strata serve: apply
// and the audits read it by URL; commands that write a repository refuse
// a URL.
func TestHTTPRepository(t *testing.T) {
	s := &session{t: t, dir: t.TempDir()}
	s.ok("key", "generate", "--out", "k")
	s.ok("build-image", filepath.Join(demoDir, "recipe.yaml"), "--out", "images", "--key", "k.key")
	s.ok("repo", "init", "repo", "--image", "images/demo-1.0.0.squashfs", "--key", "k.key")
	for i, v := range []string{"1.0.1", "1.0.2"} {
		s.write("web.conf", "listen 808"+string(rune('1'+i))+"\n")
		s.ok("overlay", "create", "--repo", "repo", "--version", v, "--key", "k.key", "--add", "/etc/demo/web.conf=web.conf")
	}
	url := startServe(t, s, "repo")
	s.ok("provision", "--image", "images/demo-1.0.0.squashfs", "--root", "node")
	s.ok("apply-overlay", "--root", "node", "--repo", url, "--through", "1.0.1", "--restart-with", "none")
	s.ok("apply-overlay", "--root", "node", "--repo", url, "--restart-with", "none")
	if a := s.verify("node", url); a.Head.Version != "1.0.2" {
		t.Errorf("node at %s after applying from %s, want 1.0.2", a.Head.Version, url)
	}
	s.ok("verify-sequence", "--repo", url, "--pub", "k.pub")
	// Regenerating and provisioning at the head read the image over HTTP.
	s.ok("regenerate", "--repo", url, "--key", "k.key", "--out", "regen")
	s.ok("provision", "--repo", url, "--key", "k.key", "--root", "fresh")
	if a := s.verify("fresh", url); a.Head.Version != "1.0.2" {
		t.Errorf("a node provisioned at the head of %s is at %s", url, a.Head.Version)
	}
	for _, args := range [][]string{
		{"overlay", "create", "--repo", url, "--version", "1.0.3", "--key", "k.key", "--add", "/etc/demo/web.conf=web.conf"},
		{"repo", "refresh", url, "--key", "k.key"},
		{"repo", "init", url, "--image", "images/demo-1.0.0.squashfs", "--key", "k.key"},
	} {
		_, stderr, code := s.run(args...)
		if code != 2 || !strings.Contains(stderr, "read-only") {
			t.Errorf("strata %s: exit %d, %s; want 2 naming the URL read-only", strings.Join(args, " "), code, stderr)
		}
	}
	_, stderr, code := s.run("apply-overlay", "--root", "node", "--repo", "ftp://example.net/repo")
	if code != 2 || !strings.Contains(stderr, "unknown scheme") {
		t.Errorf("an ftp repository: exit %d, %s", code, stderr)
	}
}

// A repository pushed to a real registry (strata repo push) is followed
// and audited by reference.
func TestOCIRepository(t *testing.T) {
	addr := registrytest.Start(t)
	s := &session{t: t, dir: t.TempDir()}
	s.ok("key", "generate", "--out", "k")
	s.ok("build-image", filepath.Join(demoDir, "recipe.yaml"), "--out", "images", "--key", "k.key")
	s.ok("repo", "init", "repo", "--image", "images/demo-1.0.0.squashfs", "--key", "k.key")
	s.write("web.conf", "listen 8081\n")
	s.ok("overlay", "create", "--repo", "repo", "--version", "1.0.1", "--key", "k.key", "--add", "/etc/demo/web.conf=web.conf")
	ref := "oci://" + addr + "/strata/demo:stable"
	var pushed struct {
		Digest string `json:"digest"`
	}
	s.okJSON(&pushed, "repo", "push", "repo", ref)
	if !strings.HasPrefix(pushed.Digest, "sha256:") {
		t.Fatalf("repo push: %+v", pushed)
	}
	s.ok("provision", "--image", "images/demo-1.0.0.squashfs", "--root", "node")
	s.ok("apply-overlay", "--root", "node", "--repo", ref, "--restart-with", "none")
	if a := s.verify("node", ref); a.Head.Version != "1.0.1" {
		t.Errorf("node at %s after applying from %s", a.Head.Version, ref)
	}
	s.ok("verify-sequence", "--repo", ref, "--pub", "k.pub")
	if _, stderr, code := s.run("apply-overlay", "--root", "node", "--repo", "oci://"+addr+"/strata/missing"); code == 0 || !strings.Contains(stderr, "strata/missing") {
		t.Errorf("a repository the registry lacks: exit %d: %s", code, stderr)
	}
	if _, stderr, code := s.run("overlay", "create", "--repo", ref, "--version", "1.0.2", "--key", "k.key", "--add", "/etc/demo/web.conf=web.conf"); code != 2 || !strings.Contains(stderr, "read-only") {
		t.Errorf("overlay create into a registry: exit %d: %s", code, stderr)
	}
}
