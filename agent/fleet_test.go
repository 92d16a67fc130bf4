package agent_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// Issue 9, test 5 (without the page): strata status over real agents. One
// node follows the repository and owes the restart its overlays call for
// (this agent has no restarter); one has no repository configured and
// stays at the image, behind; one does not answer. Each is reported as it
// is, and the status is an error.
func TestFleetStatusOverAgents(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.publish()
	v := w.publish()
	_, following, _ := w.run("repo: " + w.srv.URL + "/\ninterval: 1s\njitter: 0%\n")
	eventually(t, "the node at "+v, func() bool { return w.head() == v })

	idle := filepath.Join(t.TempDir(), "idle") // a second node of the same image, never configured
	if _, err := builder.Provision(ctx, filepath.Join(w.dir, "images", "demo-1.0.0.squashfs"), idle, nil); err != nil {
		t.Fatal(err)
	}
	b := agent.New(agent.Options{Root: idle, ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), Log: func(string) {}})
	bs := httptest.NewServer(b.Handler())
	defer bs.Close()
	gone := httptest.NewServer(nil)
	gone.Close()

	lineName, line, err := repo.LineVersions(ctx, w.repo, "")
	if err != nil {
		t.Fatal(err)
	}
	// A node of another world: the same recipe, but an image signed by
	// another key, so another line as far as digests go.
	stranger := newWorld(t)
	sa := agent.New(agent.Options{Root: stranger.root, ConfigPath: filepath.Join(stranger.dir, "none.yaml"), Log: func(string) {}})
	ss := httptest.NewServer(sa.Handler())
	defer ss.Close()
	nodes := []fleet.Node{{Name: "follower", Health: following + "/health"}, {Name: "idle", Health: bs.URL + "/health"}, {Name: "gone", Health: gone.URL + "/health"}, {Name: "stranger", Health: ss.URL + "/health"}}
	var rep *fleet.Report
	eventually(t, "the follower's health at "+v, func() bool {
		rep = fleet.Status(ctx, nodes, fleet.StatusOptions{Line: line, LineName: lineName, Timeout: 5 * time.Second})
		return rep.Nodes[0].Head == v
	})
	want := map[string]string{"follower": fleet.StatePending, "idle": fleet.StateBehind, "gone": fleet.StateUnreachable, "stranger": fleet.StateDiverged}
	for _, n := range rep.Nodes {
		if n.State != want[n.Name] {
			t.Errorf("%s: %s (%+v), want %s", n.Name, n.State, n, want[n.Name])
		}
	}
	if f := rep.Nodes[0]; f.Behind != 0 || f.ConfigMatches != 0 || f.Pending != 1 {
		t.Errorf("follower: %+v, want at the head with one restart owed", f)
	}
	if i := rep.Nodes[1]; i.Head != "1.0.0" || i.Behind != 2 {
		t.Errorf("idle: %+v, want 1.0.0, 2 behind", i)
	}
	if rep.Reference != v || rep.Err() == nil {
		t.Errorf("reference %s, err %v", rep.Reference, rep.Err())
	}

	// The same on the status page, as a real browser renders it.
	page := fleet.NewPage(nodes, fleet.PageOptions{StatusOptions: fleet.StatusOptions{Timeout: 5 * time.Second},
		Reference: func(context.Context) (string, []manifests.Ref, error) { return lineName, line, nil }})
	page.Gather(ctx)
	ps := httptest.NewServer(page)
	defer ps.Close()
	dom := renderPage(t, ps.URL+"/")
	for name, state := range want {
		if !strings.Contains(dom, `<tr class="`+state+`" data-node="`+name+`">`) {
			t.Errorf("the page does not show %s as %s:\n%s", name, state, dom)
		}
	}
	if !strings.Contains(dom, "1 pending 1 behind 1 diverged 1 unreachable") || !strings.Contains(dom, `<b id="reference">`+v+`</b>`) {
		t.Errorf("the page's summary:\n%s", dom)
	}
	// The follower's sequence: every version up to its head marked.
	row := dom[strings.Index(dom, `data-node="follower"`):]
	row = row[:strings.Index(row, "</tr>")]
	if strings.Count(row, `class="has"`) != len(line) || strings.Contains(row, `class="lacks"`) {
		t.Errorf("the follower's sequence cells: %s", row)
	}
}

// renderPage loads url in headless Chromium (Debian's chromium, installed
// by scripts/deps.sh) and returns the DOM it rendered.
func renderPage(t *testing.T, url string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is required (make test installs it: scripts/deps.sh): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+t.TempDir(), "--dump-dom", url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errOut.String())
	}
	return out.String()
}
