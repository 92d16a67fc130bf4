//go:build debian

package live_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/registrytest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/overlay"
)

// publishInto brings the repository's new members into the node's copy,
// then its index (signature first), as a publisher syncing a web root
// does.
func (l *lab) publishInto(dst string) {
	l.t.Helper()
	err := filepath.WalkDir(l.repo, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.repo, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case strings.HasPrefix(d.Name(), "index.json") || strings.HasPrefix(d.Name(), "."):
			return nil
		}
		if _, err := os.Lstat(target); err == nil {
			return nil
		}
		return os.Link(p, target)
	})
	if err != nil {
		l.t.Fatal(err)
	}
	for _, name := range []string{repo.SigPath(repo.IndexFile), repo.IndexFile} {
		raw, err := os.ReadFile(filepath.Join(l.repo, name))
		if err != nil {
			l.t.Fatal(err)
		}
		tmp := filepath.Join(dst, "."+name+".tmp")
		if err := os.WriteFile(tmp, raw, 0o644); err != nil {
			l.t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dst, name)); err != nil {
			l.t.Fatal(err)
		}
	}
}

// Issue 8, test 1 on a live node: the agent, under the node's systemd,
// follows a repository served over HTTP (strata serve, inside the node's
// own network) and applies two overlays in order through the overlayfs
// backend, reloading nginx for its config change and restarting nothing
// else; its health endpoint says where the node is.
func TestAgentFollowsRepository(t *testing.T) {
	l := newLab(t, "live-agent")
	inNode := filepath.Join(l.state, "var/tmp/repo")
	l.publishInto(inNode)
	l.sh("systemd-run --quiet --unit=strata-test-serve /usr/bin/strata serve /var/tmp/repo --listen 127.0.0.1:8089")
	l.sh("systemd-run --quiet --unit=strata-test-agent /usr/bin/strata agent --root / --repo http://127.0.0.1:8089/ --interval 1s --jitter 0% --config /var/tmp/no-agent.yaml --listen 127.0.0.1:9411")
	nginx := l.unit("nginx.service")
	before := l.units()
	l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-agent.conf", Src: l.file(nginxSite("8082", "pulled-1"))}}})
	l.create("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/pulled", Src: l.file("pulled-2\n")}}})
	l.publishInto(inNode)
	deadline := time.Now().Add(3 * time.Minute)
	for l.status().Head.Version != "1.0.2" {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not reach 1.0.2; its journal:\n%s", l.sh("journalctl -u strata-test-agent --no-pager | tail -40"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	led := l.ledger()
	var order []string
	for _, e := range led.Applied() {
		order = append(order, e.Version)
	}
	if strings.Join(order, ",") != "1.0.1,1.0.2" {
		t.Errorf("applied %v, want 1.0.1 then 1.0.2", order)
	}
	if body := l.get("8082"); !strings.Contains(body, "pulled-1") {
		t.Errorf("nginx does not serve the pulled config:\n%s", body)
	}
	if got := l.unit("nginx.service"); got.MainPID != nginx.MainPID {
		t.Errorf("nginx MainPID %d -> %d: restarted, not reloaded", nginx.MainPID, got.MainPID)
	}
	l.requireChanged(before)
	health := l.sh(`exec 3<>/dev/tcp/127.0.0.1/9411; printf 'GET /health HTTP/1.0\r\nHost: x\r\n\r\n' >&3; cat <&3`)
	for _, want := range []string{"HTTP/1.0 200", `"backend": "overlayfs"`, `"version": "1.0.2"`, `"result": "ok"`, `"path": "etc/nginx/conf.d/strata-agent.conf"`} {
		if !strings.Contains(health, want) {
			t.Errorf("health lacks %q:\n%s", want, health)
		}
	}
	l.audit()
}

// Issue 8, test 2 on a live node: the same through an OCI registry. The
// registry (Debian's docker-registry) runs on this host inside the node's
// network namespace, so the agent under the node's systemd reaches it at
// oci://127.0.0.1:5000, and strata repo push runs there too (nsenter), as
// a CI job beside the registry would.
func TestAgentFollowsRegistry(t *testing.T) {
	l := newLab(t, "live-agent-oci")
	netns := fmt.Sprintf("/proc/%d/ns/net", l.node.PID())
	registrytest.StartIn(t, netns, "127.0.0.1:5000", func() error {
		out := l.sh(`exec 3<>/dev/tcp/127.0.0.1/5000 && printf 'GET /v2/ HTTP/1.0\r\n\r\n' >&3 && head -1 <&3 || true`)
		if !strings.Contains(out, " 200") {
			return fmt.Errorf("GET /v2/: %q", out)
		}
		return nil
	})
	const ref = "oci://127.0.0.1:5000/strata/debian-node:live"
	push := func() {
		t.Helper()
		out, err := exec.Command("nsenter", "--net="+netns, l.img.Strata, "repo", "push", l.repo, ref).CombinedOutput()
		if err != nil {
			t.Fatalf("repo push: %v\n%s", err, out)
		}
	}
	push()
	l.sh("systemd-run --quiet --unit=strata-test-agent /usr/bin/strata agent --root / --repo " + ref + " --interval 1s --jitter 0% --config /var/tmp/no-agent.yaml --listen 127.0.0.1:9411")
	nginx := l.unit("nginx.service")
	before := l.units()
	l.create("1.0.1", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-agent.conf", Src: l.file(nginxSite("8083", "from-registry"))}}})
	l.create("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/pulled", Src: l.file("from the registry\n")}}})
	push()
	deadline := time.Now().Add(3 * time.Minute)
	for l.status().Head.Version != "1.0.2" {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not reach 1.0.2; its journal:\n%s", l.sh("journalctl -u strata-test-agent --no-pager | tail -40"))
		}
		time.Sleep(500 * time.Millisecond)
	}
	var order []string
	for _, e := range l.ledger().Applied() {
		order = append(order, e.Version)
	}
	if strings.Join(order, ",") != "1.0.1,1.0.2" {
		t.Errorf("applied %v, want 1.0.1 then 1.0.2", order)
	}
	if body := l.get("8083"); !strings.Contains(body, "from-registry") {
		t.Errorf("nginx does not serve the pulled config:\n%s", body)
	}
	if got := l.unit("nginx.service"); got.MainPID != nginx.MainPID {
		t.Errorf("nginx MainPID %d -> %d: restarted, not reloaded", nginx.MainPID, got.MainPID)
	}
	l.requireChanged(before)
	health := l.sh(`exec 3<>/dev/tcp/127.0.0.1/9411; printf 'GET /health HTTP/1.0\r\nHost: x\r\n\r\n' >&3; cat <&3`)
	for _, want := range []string{"HTTP/1.0 200", `"backend": "overlayfs"`, `"version": "1.0.2"`, `"result": "ok"`, ref} {
		if !strings.Contains(health, want) {
			t.Errorf("health lacks %q:\n%s", want, health)
		}
	}
	l.audit()
}
