package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/fixture"
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
	if _, err := builder.Provision(ctx, w.image, idle, nil); err != nil {
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
		if !strings.Contains(dom, `<tr data-node="`+name+`" data-state="`+state+`"><td class="name">`+name+`</td><td class="state st-`+state+`">`) {
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
	// Only the cells that are bad are coloured: the follower is at the
	// head (behind 0, not coloured), owing restarts (coloured).
	if !strings.Contains(row, `<td class="behind">0</td>`) || !strings.Contains(row, `<td class="pending bad">`) {
		t.Errorf("the follower's cells are coloured wrongly: %s", row)
	}
}

// renderPage loads url in headless Chromium (Debian's chromium, installed
// by scripts/deps.sh) and returns the DOM it rendered.
func renderPage(t *testing.T, url string) string {
	t.Helper()
	testenv.RequireTools(t, []string{"chromium"})
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
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

// Signed health (issue 25, item 8): an agent signs each /health answer
// with its node's identity key, over the nonce the client sent. With the
// key pinned in the inventory, fleet status takes the agent's answer and
// refuses, as unreachable, an unsigned one, one signed by another node's
// key, and a replay of an answer signed for another nonce.
func TestSignedHealth(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	nodeAgent := func(root string) *httptest.Server {
		a := agent.New(agent.Options{Root: root, ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), Log: func(string) {}})
		s := httptest.NewServer(a.Handler())
		t.Cleanup(s.Close)
		return s
	}
	real := nodeAgent(w.root)
	other := filepath.Join(t.TempDir(), "other")
	if _, err := builder.Provision(ctx, w.image, other, nil); err != nil {
		t.Fatal(err)
	}
	impostor := nodeAgent(other)

	resp, err := http.Get(real.URL + "/health?nonce=abc123")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	key, err := nodestate.Node{Root: w.root}.Identity(false)
	if err != nil {
		t.Fatalf("the agent made no identity key: %v", err)
	}
	var h schema.Health
	if err := json.Unmarshal(body, &h); err != nil || h.Nonce != "abc123" || h.Identity != key.PublicString() {
		t.Fatalf("health: %v, nonce %q, identity %q (want %q)", err, h.Nonce, h.Identity, key.PublicString())
	}
	sig, _ := base64.StdEncoding.DecodeString(resp.Header.Get(schema.HealthSignatureHeader))
	pub, _ := key.PublicKeySet()
	if _, err := pub.VerifyFor(body, sig, schema.HealthComment); err != nil {
		t.Fatalf("the health's signature: %v", err)
	}
	if r, err := http.Get(real.URL + "/health?nonce=../x"); err != nil || r.StatusCode != http.StatusBadRequest {
		t.Errorf("a nonce with symbols: %v %v, want 400", r, err)
	}

	// Servers answering in the node's place.
	unsigned := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(real.URL + r.URL.RequestURI())
		if err != nil {
			rw.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(rw, resp.Body) // the signature header dropped
	}))
	defer unsigned.Close()
	replay := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set(schema.HealthSignatureHeader, resp.Header.Get(schema.HealthSignatureHeader))
		_, _ = rw.Write(body) // the answer signed for nonce abc123
	}))
	defer replay.Close()
	id := key.PublicString()
	nodes := []fleet.Node{
		{Name: "real", Health: real.URL + "/health", Identity: id},
		{Name: "unsigned", Health: unsigned.URL + "/health", Identity: id},
		{Name: "impostor", Health: impostor.URL + "/health", Identity: id},
		{Name: "replay", Health: replay.URL + "/health", Identity: id},
		{Name: "unpinned", Health: unsigned.URL + "/health"},
	}
	rep := fleet.Status(ctx, nodes, fleet.StatusOptions{Timeout: 5 * time.Second})
	want := map[string]string{"real": "", "unsigned": "no signature", "impostor": "signature", "replay": "a replay", "unpinned": ""}
	for _, n := range rep.Nodes {
		switch {
		case want[n.Name] == "" && n.State == fleet.StateUnreachable:
			t.Errorf("%s: unreachable: %s", n.Name, n.Error)
		case want[n.Name] != "" && (n.State != fleet.StateUnreachable || !strings.Contains(n.Error, want[n.Name]) || !strings.Contains(n.Error, "not signed by the node's identity key")):
			t.Errorf("%s: %s %q, want unreachable saying %q", n.Name, n.State, n.Error, want[n.Name])
		}
		if n.Name == "real" && (!n.Verified || n.Identity != id) {
			t.Errorf("real: verified %v, identity %q", n.Verified, n.Identity)
		}
		if n.Name == "unpinned" && n.Verified {
			t.Error("unpinned: reported verified")
		}
	}
}

// Each node reports its own id, never the host's (issue 22): two
// directory nodes of one image on one host report their identity keys'
// ids, a node provisioned with an id reports that, one with neither but a
// machine-id reports it, and one with nothing reports none, not the
// host's name.
func TestHealthNodeIDIsTheNodes(t *testing.T) {
	ctx := context.Background()
	f := fixture.New(t)
	a, b := f.Provision(), f.Provision()
	idOf := func(root string) string {
		t.Helper()
		h, err := agent.ReadHealth(ctx, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		return h.NodeID
	}
	if id := idOf(a); id != "" {
		t.Errorf("a node with no id of its own reports %q", id)
	}
	var keys []string
	for _, root := range []string{a, b} {
		k, err := nodestate.Node{Root: root}.Identity(true)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.ID())
	}
	if ia, ib := idOf(a), idOf(b); ia != keys[0] || ib != keys[1] || ia == ib {
		t.Errorf("node ids %q and %q, want their identity keys' %v", ia, ib, keys)
	}
	if err := os.MkdirAll(filepath.Join(a, "state/identity"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "state/identity/node-id"), []byte("rack4-07\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id := idOf(a); id != "rack4-07" {
		t.Errorf("a provisioned node reports %q, want its node-id", id)
	}
	c := f.Provision()
	if err := os.WriteFile(filepath.Join(c, "etc/machine-id"), []byte("0123456789abcdef0123456789abcdef\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if id := idOf(c); id != "0123456789abcdef0123456789abcdef" {
		t.Errorf("a node with a machine-id reports %q", id)
	}
}
