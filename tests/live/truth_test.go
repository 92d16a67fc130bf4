//go:build debian

package live_test

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/tests/promtest"
)

// Issue 22 on a live node: its agent under the node's systemd, a real
// Prometheus scraping it, the fleet view over its health URL and SSH.
//   - A hand edit of nginx's config turns strata_service_config_current
//     to 0 within a few scrapes, and the fleet note names the file; the
//     file put back, 1 again.
//   - A broken agent config while a publication arrives: the agent
//     applies it with its last good config and says its config is
//     invalid.
//   - A held node: the agent leaves it where it is until it is released.
//   - A failed cluster restart: restart debt with the error, in status,
//     node history and the fleet view, until a restart passes.
func TestRuntimeTruth(t *testing.T) {
	c := newCluster(t, "truth", 1)
	c.writeInventory(9411)
	l := c.labs[0]
	inNode := filepath.Join(l.state, "var/tmp/repo")
	agentConfig := filepath.Join(l.state, "var/tmp/agent.yaml")
	good := "repo: http://127.0.0.1:8089/\ninterval: 1s\njitter: 0%\n"
	writeFile(t, agentConfig, good)
	l.publishInto(inNode)
	l.sh("systemd-run --quiet --unit=strata-test-serve /usr/bin/strata serve /var/tmp/repo --listen 127.0.0.1:8089")
	l.sh("systemd-run --quiet --unit=strata-test-agent /usr/bin/strata agent --root / --config /var/tmp/agent.yaml --listen 0.0.0.0:9411")
	publish := func(v string, ch overlay.Change) {
		c.publish(v, ch)
		l.publishInto(inNode)
	}
	head := func(v string) {
		t.Helper()
		waitFor(t, "the agent to apply "+v, func() bool { return l.status().Head.Version == v })
	}
	fleetView := func() fleet.NodeStatus {
		t.Helper()
		out, errOut, _ := c.strata("status", "--inventory", c.inventory, "--repo", c.repo, "--json")
		var rep fleet.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Nodes) != 1 {
			t.Fatalf("status --inventory: %v\n%s\n%s", err, out, errOut)
		}
		return rep.Nodes[0]
	}

	// 1.0.1: an nginx site (reload), and a drop-in that makes rsyslog's
	// start fail while /run/strata-flaky exists (for the failed restart).
	publish("1.0.1", overlay.Change{Adds: []overlay.Add{
		{Dest: "/etc/nginx/conf.d/strata-truth.conf", Src: l.file(nginxSite("8093", "truth-1"))},
		{Dest: "/etc/systemd/system/rsyslog.service.d/strata-flaky.conf", Src: l.file("[Service]\nExecStartPre=/bin/sh -c 'test ! -e /run/strata-flaky'\n")},
	}})
	head("1.0.1")

	prom := promtest.Start(t, net.JoinHostPort(l.node.Address(), "9411"))
	nginx := func() string {
		return promtest.Value(prom, `strata_service_config_current{unit="nginx.service"}`)
	}
	waitFor(t, "Prometheus to see nginx.service current", func() bool { return nginx() == "1" })
	undo := l.handEdit("etc/nginx/conf.d/strata-truth.conf", nginxSite("8093", "edited by hand"))
	edited := time.Now()
	waitFor(t, "the hand edit to turn the metric to 0", func() bool { return nginx() == "0" })
	t.Logf("the metric turned 0 %s after the hand edit", time.Since(edited).Round(time.Millisecond))
	if n := fleetView(); n.State != fleet.StatePending || !strings.Contains(n.Notes(), "nginx.service: config changed on disk (etc/nginx/conf.d/strata-truth.conf") {
		t.Fatalf("the fleet view of the hand edit: %+v", n)
	}
	undo()
	waitFor(t, "the file put back to turn the metric to 1", func() bool { return nginx() == "1" })

	// A broken agent config while 1.0.2 is published.
	writeFile(t, agentConfig, "repo: [\n")
	waitFor(t, "the agent to report its config invalid", func() bool {
		return promtest.Value(prom, `strata_agent_config_valid`) == "0"
	})
	publish("1.0.2", overlay.Change{Adds: []overlay.Add{{Dest: "/etc/nginx/conf.d/strata-truth.conf", Src: l.file(nginxSite("8093", "truth-2"))}}})
	head("1.0.2")
	if n := fleetView(); n.State != fleet.StateFailing || !strings.Contains(n.Notes(), "config invalid: /var/tmp/agent.yaml") || !strings.Contains(n.Notes(), "last good config") {
		t.Fatalf("the fleet view of a broken agent config: %+v", n)
	}
	writeFile(t, agentConfig, good)

	// Held: the agent leaves the node at 1.0.2 while 1.0.3 is there.
	if _, errOut, code := l.strata("hold", "--root", "/", "--reason", "live test"); code != 0 {
		t.Fatalf("hold exited %d: %s", code, errOut)
	}
	publish("1.0.3", overlay.Change{Adds: []overlay.Add{{Dest: "/usr/share/strata-live/truth", Src: l.file("3\n")}}})
	waitFor(t, "the agent to say it is held", func() bool {
		return strings.Contains(l.sh(`exec 3<>/dev/tcp/127.0.0.1/9411; printf 'GET /health HTTP/1.0\r\nHost: x\r\n\r\n' >&3; cat <&3`), `"result": "held"`)
	})
	if v := l.status().Head.Version; v != "1.0.2" {
		t.Fatalf("a held node moved to %s", v)
	}
	if n := fleetView(); n.State != fleet.StateHeld || !strings.Contains(n.Notes(), "held at 1.0.2") {
		t.Fatalf("the fleet view of the held node: %+v", n)
	}
	if _, errOut, code := l.strata("release", "--root", "/"); code != 0 {
		t.Fatalf("release exited %d: %s", code, errOut)
	}
	head("1.0.3")

	// A cluster restart that fails: debt with the error everywhere.
	l.sh("touch /run/strata-flaky")
	if _, errOut, code := c.strata("restart", "--inventory", c.inventory, "--unit", "rsyslog.service"); code == 0 {
		t.Fatalf("a cluster restart of a unit whose start fails exited 0:\n%s", errOut)
	}
	st := l.status()
	if len(st.Pending) != 1 || st.Pending[0].Unit != "rsyslog.service" || st.LastFailure == nil || !strings.Contains(st.LastFailure.Error, "rsyslog.service") {
		t.Fatalf("status after the failed restart: debt %+v, last failure %+v", st.Pending, st.LastFailure)
	}
	if out, _, _ := l.strata("node", "history", "--root", "/"); !strings.Contains(out, "restart failed") {
		t.Fatalf("node history does not name the failed restart:\n%s", out)
	}
	// The agent's health answer is at most HealthCacheFor (2 s) old.
	var n fleet.NodeStatus
	waitFor(t, "the fleet view to show the failed restart", func() bool {
		n = fleetView()
		return strings.Contains(n.Notes(), "restart failed at") && n.State == fleet.StatePending
	})
	l.sh("rm /run/strata-flaky")
	if _, errOut, code := c.strata("restart", "--inventory", c.inventory, "--unit", "rsyslog.service"); code != 0 {
		t.Fatalf("the restart once the unit can start exited %d:\n%s", code, errOut)
	}
	if st := l.status(); len(st.Pending) != 0 || st.LastFailure != nil {
		t.Fatalf("after a restart that passed: debt %+v, last failure %+v", st.Pending, st.LastFailure)
	}
}
