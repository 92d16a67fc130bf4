package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/tests/promtest"
)

// A real Prometheus scrapes two agents; their series, queried through its
// API, say where each node is and what it owes.
func TestPrometheusScrapesAgents(t *testing.T) {
	one, two, three := newWorld(t), newWorld(t), newWorld(t)
	one.publish()
	two.publish()
	two.publish()
	_, base1, _ := one.run("repo: " + one.srv.URL + "\ninterval: 1s\njitter: 0%\n")
	_, base2, _ := two.run("repo: " + two.srv.URL + "\ninterval: 1s\njitter: 0%\n")
	_, base3, _ := three.run("repo: " + three.srv.URL + "\ninterval: 1s\njitter: 0%\n")
	eventually(t, "both nodes at their heads", func() bool { return one.head() == "1.0.1" && two.head() == "1.0.2" })
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	prom := promtest.Start(t, host(base1), host(base2), host(base3))

	var heads []promtest.Result
	eventually(t, "Prometheus to scrape both heads", func() bool {
		heads = promtest.Query(prom, `strata_head_info`)
		return len(heads) == 3
	})
	got := map[string]string{}
	for _, r := range heads {
		got[r.Metric["instance"]] = r.Metric["version"]
	}
	if got[host(base1)] != "1.0.1" || got[host(base2)] != "1.0.2" || got[host(base3)] != "1.0.0" {
		t.Errorf("strata_head_info versions by instance: %v", got)
	}
	// The counters follow the heads by a moment (and a scrape).
	counts := func() string {
		var out []string
		for _, r := range promtest.Query(prom, `strata_overlays_applied_total`) {
			out = append(out, fmt.Sprint(r.Value[1]))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	eventually(t, "overlays applied counted 0, 1 and 2", func() bool { return counts() == "0,1,2" })
	// No restarter: app.service owes a restart on both nodes.
	stale := promtest.Query(prom, `strata_service_config_current{unit="app.service"} == 0`)
	if len(stale) != 2 {
		t.Errorf("strata_service_config_current == 0 on %d nodes, want 2", len(stale))
	}
	if up := promtest.Query(prom, `sum(up{job="strata"})`); len(up) != 1 || fmt.Sprint(up[0].Value[1]) != "3" {
		t.Errorf("up: %v", up)
	}

	// The third node was never changed: app.service loaded the head's
	// config. A hand edit turns its metric to 0 at the next scrape, its
	// state to "changed", and the fleet view's note names the file.
	current := func(v string) bool {
		r := promtest.Query(prom, `strata_service_config_current{unit="app.service",instance="`+host(base3)+`"}`)
		return len(r) == 1 && fmt.Sprint(r[0].Value[1]) == v
	}
	eventually(t, "the untouched node's app.service current", func() bool { return current("1") })
	if err := os.WriteFile(filepath.Join(three.root, "etc/app/app.conf"), []byte("port 9999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hand edit turning the metric to 0", func() bool { return current("0") })
	if r := promtest.Query(prom, `strata_service_config_state{unit="app.service",state="changed",instance="`+host(base3)+`"}`); len(r) != 1 {
		t.Errorf("strata_service_config_state changed: %v", r)
	}
	rep := fleet.Status(context.Background(), []fleet.Node{{Name: "three", Health: base3 + "/health"}}, fleet.StatusOptions{})
	if n := rep.Nodes[0]; n.State != fleet.StatePending || n.ConfigMatches != 0 || !strings.Contains(n.Notes(), "app.service: config changed on disk (etc/app/app.conf: a local edit") ||
		n.ConfigDigest == "" || n.LoadedAt.IsZero() {
		t.Errorf("the fleet view of the hand-edited node: %+v", n)
	}
}
