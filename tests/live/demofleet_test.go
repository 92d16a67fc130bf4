//go:build debian && demofleet

package live_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// demo prints a walk through a fleet for a newcomer: each step, each
// command as typed, and what it printed.
type demo struct {
	t *testing.T
	c *cluster
}

func (d *demo) step(format string, a ...any) {
	fmt.Printf("\n== "+format+"\n", a...)
}

// host runs strata on this host, as an operator would, prints the
// command line and its output, and fails the demo when the exit status
// is not want.
func (d *demo) host(want int, args ...string) string {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.c.img.Strata, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + d.c.dir}
	cmd.Dir = d.c.dir
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		d.t.Fatalf("strata %v: %v", args, err)
	}
	shown := strings.ReplaceAll(strings.Join(args, " "), d.c.dir+"/", "")
	fmt.Printf("$ strata %s\n%s", shown, strings.ReplaceAll(string(out), d.c.dir+"/", ""))
	if code != want {
		d.t.Fatalf("strata %s exited %d, want %d", shown, code, want)
	}
	return string(out)
}

// fleet runs a fleet command (SSH settings appended) on this host.
func (d *demo) fleet(want int, args ...string) string {
	d.t.Helper()
	return d.host(want, append(args, "--known-hosts", d.c.knownHosts, "--identity", d.c.identity, "--ssh-timeout", "3s")...)
}

// on runs strata on node l, as root there would.
func (d *demo) on(l *lab, want int, args ...string) string {
	d.t.Helper()
	out, errOut, code := l.strata(args...)
	fmt.Printf("%s# strata %s\n%s%s", l.node.Name(), strings.Join(args, " "), out, errOut)
	if code != want {
		d.t.Fatalf("on %s: strata %v exited %d, want %d", l.node.Name(), args, code, want)
	}
	return out
}

// sync brings the repository's new overlays to each node's copy, which
// the node's own strata serve hands its agent.
func (d *demo) sync() {
	for _, l := range d.c.labs {
		l.publishInto(filepath.Join(l.state, "var/tmp/repo"))
	}
}

// metric fetches one node's metrics and returns the lines that start
// with prefix.
func (d *demo) metric(l *lab, prefix string) string {
	d.t.Helper()
	resp, err := http.Get("http://" + net.JoinHostPort(l.node.Address(), "9411") + "/metrics")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestDemoFleet is make demo-fleet: three nodes of the Debian image, each
// a namespaced systemd with sshd, nginx and a strata agent, and the story
// of running them: central config with validation, a rollout, a node
// down, a local edit the metrics catch, a hold, a cluster restart and the
// status page. Every node and process goes away at the end.
func TestDemoFleet(t *testing.T) {
	d := &demo{t: t}
	d.step("starting three nodes (namespaced systemd, sshd, nginx) from the Debian image")
	c := newCluster(t, "demo", 3)
	d.c = c
	c.writeInventory(9411)
	d.sync()
	for _, l := range c.labs {
		l.sh("systemd-run --quiet --unit=strata-demo-serve /usr/bin/strata serve /var/tmp/repo --listen 127.0.0.1:8089")
		l.sh("systemd-run --quiet --unit=strata-demo-agent /usr/bin/strata agent --root / --repo http://127.0.0.1:8089/ --interval 1h --jitter 0% --config /var/tmp/no-agent.yaml --listen 0.0.0.0:9411")
	}
	inv, _ := os.ReadFile(c.inventory)
	fmt.Printf("inventory.yaml:\n%s", strings.ReplaceAll(string(inv), c.dir+"/", ""))
	waitFor(t, "the agents to answer", func() bool {
		out, _, code := c.strata("status", "--inventory", c.inventory, "--repo", c.repo)
		return code == 0 && strings.Contains(out, "3 current")
	})
	d.fleet(0, "status", "--inventory", c.inventory, "--repo", c.repo)

	site := filepath.Join(c.dir, "demo-site.conf")
	d.step("editing config centrally: a new nginx site, validated by nginx -t before it is published")
	writeFile(t, site, nginxSite("8090", "hello from strata"))
	d.host(0, "config", "set", "--repo", c.repo, "--key", c.img.Key, "/etc/nginx/conf.d/demo.conf="+site)

	d.step("a config nginx refuses is not published (exit 3, nginx's own words)")
	writeFile(t, site, "server { listen 127.0.0.1:8090; bogus_directive on; }\n")
	d.host(3, "config", "set", "--repo", c.repo, "--key", c.img.Key, "/etc/nginx/conf.d/demo.conf="+site)

	d.step("rolling 1.0.1 out over SSH: a canary first, then the rest")
	d.sync()
	d.fleet(0, "rollout", "--inventory", c.inventory, "--repo", c.repo, "--canary", "1", "--max-unavailable", "1")
	fmt.Printf("demo1$ curl http://127.0.0.1:8090/\n%s", c.labs[0].get("8090"))

	d.step("one node down (its link cut): the rollout of 1.0.2 updates the others, names it, and stops (exit 3)")
	writeFile(t, site, nginxSite("8090", "hello again"))
	d.host(0, "config", "set", "--repo", c.repo, "--key", c.img.Key, "/etc/nginx/conf.d/demo.conf="+site)
	d.sync()
	down := c.labs[2]
	if err := down.node.SetLink(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	d.fleet(3, "rollout", "--inventory", c.inventory, "--repo", c.repo, "--max-unavailable", "1")
	d.fleet(3, "status", "--inventory", c.inventory, "--repo", c.repo)
	if err := down.node.SetLink(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	d.step("its link back: a rollout through the agents (a signed nudge each, no SSH) brings it to the head")
	d.fleet(0, "rollout", "--inventory", c.inventory, "--repo", c.repo, "--via", "agent", "--key", c.img.Key, "--max-unavailable", "1")
	d.fleet(0, "status", "--inventory", c.inventory, "--repo", c.repo)

	d.step("a local edit on demo1 (another nginx config mounted over the file: the layers are read-only images): the metric turns red at the next scrape")
	edited := c.labs[0]
	raw := edited.sh("cat /etc/nginx/conf.d/demo.conf")
	edited.handEdit("etc/nginx/conf.d/demo.conf", strings.Replace(raw, "hello again", "hello by hand", 1))
	nginx := func() string { return d.metric(edited, `strata_service_config_current{unit="nginx.service"`) }
	waitFor(t, "the metric to turn red", func() bool { return strings.HasSuffix(nginx(), "} 0") })
	fmt.Printf("$ curl -s http://%s:9411/metrics | grep 'config_current.*nginx'\n%s\n", edited.node.Address(), nginx())
	d.fleet(0, "status", "--inventory", c.inventory, "--repo", c.repo)
	d.on(edited, 0, "status", "--root", "/")

	d.step("holding demo2 where it is: rollouts skip it and name it, its agent leaves it alone")
	held := c.labs[1]
	d.on(held, 0, "hold", "--root", "/", "--reason", "investigating a slow disk")
	other := filepath.Join(c.dir, "other.conf")
	writeFile(t, other, nginxSite("8091", "another site"))
	d.host(0, "config", "set", "--repo", c.repo, "--key", c.img.Key, "/etc/nginx/conf.d/other.conf="+other)
	d.sync()
	d.fleet(3, "rollout", "--inventory", c.inventory, "--repo", c.repo, "--max-unavailable", "1")
	d.fleet(0, "status", "--inventory", c.inventory, "--repo", c.repo)
	d.step("released, demo2 follows the line again")
	d.on(held, 0, "release", "--root", "/")
	d.fleet(0, "rollout", "--inventory", c.inventory, "--repo", c.repo, "--max-unavailable", "1")

	d.step("a cluster-wide restart of nginx, repairing drift first (demo1's layer is rebuilt from the repository)")
	d.fleet(0, "restart", "--inventory", c.inventory, "--repo", c.repo, "--repair", "--unit", "nginx.service", "--max-unavailable", "1")
	waitFor(t, "every node current", func() bool {
		out, _, code := c.strata("status", "--inventory", c.inventory, "--repo", c.repo)
		return code == 0 && strings.Contains(out, "3 current")
	})
	d.fleet(0, "status", "--inventory", c.inventory, "--repo", c.repo)

	d.step("the status page: strata status --inventory --serve")
	addr := freeAddr(t)
	page := exec.Command(c.img.Strata, "status", "--inventory", c.inventory, "--repo", c.repo, "--serve", addr, "--refresh", "2s")
	page.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + c.dir}
	if err := page.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = page.Process.Kill(); _ = page.Wait() }()
	var html string
	waitFor(t, "the page", func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		html = string(b)
		return resp.StatusCode == http.StatusOK
	})
	fmt.Printf("GET http://%s/ (%d bytes of HTML, no script); its summary:\n", addr, len(html))
	if i := strings.Index(html, `<p id="summary">`); i >= 0 {
		s := html[i+len(`<p id="summary">`):]
		fmt.Println(strings.NewReplacer("<b id=\"reference\">", "", "</b>", "", "&mdash;", "-").Replace(s[:strings.Index(s, "</p>")]))
	}
	d.step("done: the nodes, their agents and the page stop now")
}
