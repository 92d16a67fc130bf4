package agent_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/repo"
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

	behind := newWorld(t) // the same recipe: an identical image, line and versions
	b := agent.New(agent.Options{Root: behind.root, ConfigPath: filepath.Join(behind.dir, "none.yaml"), Log: func(string) {}})
	bs := httptest.NewServer(b.Handler())
	defer bs.Close()
	gone := httptest.NewServer(nil)
	gone.Close()

	line, err := repo.LineVersions(ctx, w.repo, "")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []fleet.Node{{Name: "follower", Health: following + "/health"}, {Name: "idle", Health: bs.URL + "/health"}, {Name: "gone", Health: gone.URL + "/health"}}
	var rep *fleet.Report
	eventually(t, "the follower's health at "+v, func() bool {
		rep = fleet.Status(ctx, nodes, fleet.StatusOptions{Line: line, Timeout: 5 * time.Second})
		return rep.Nodes[0].Head == v
	})
	want := map[string]string{"follower": fleet.StatePending, "idle": fleet.StateBehind, "gone": fleet.StateUnreachable}
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
}
