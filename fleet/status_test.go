package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

// health returns a node's health document at head, with one managed
// config file matching or not.
func health(head string, matches bool) *schema.Health {
	h := &schema.Health{Line: "demo", Head: manifests.Ref{Version: head, Digest: "sha256:x"},
		Agent: schema.AgentState{Config: "ok", ConfigValid: true, LastApply: &schema.ApplyResult{Result: "ok"}}}
	c := schema.ConfigFile{Path: "etc/app.conf", SHA256: "aa", Expected: "aa", ModTime: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	if !matches {
		c.SHA256 = "bb"
	}
	h.Configs = []schema.ConfigFile{c}
	return h
}

func refs(versions ...string) []manifests.Ref {
	var out []manifests.Ref
	for _, v := range versions {
		out = append(out, manifests.Ref{Version: v, Digest: "sha256:x"})
	}
	return out
}

// TestStatusDivergedAndJunk: a node on another line, one at a head whose
// digest is not the repository's, one whose files drifted, and one
// reporting a version that is not one.
func TestStatusDivergedAndJunk(t *testing.T) {
	other := health("1.0.2", true)
	other.Line = "other"
	forked := health("1.0.2", true)
	forked.Head.Digest = "sha256:fork"
	drifted := health("1.0.2", true)
	no := false
	drifted.Agent.TreeMatches = &no
	junk := health("1.0.2", true)
	junk.Head.Version = "9"
	nodes := []Node{
		{Name: "other", Health: serveHealth(t, other, 0)},
		{Name: "forked", Health: serveHealth(t, forked, 0)},
		{Name: "drifted", Health: serveHealth(t, drifted, 0)},
		{Name: "junk", Health: serveHealth(t, junk, 0)},
	}
	rep := Status(context.Background(), nodes, StatusOptions{Line: refs("1.0.0", "1.0.1", "1.0.2"), LineName: "demo"})
	want := map[string]string{"other": StateDiverged, "forked": StateDiverged, "drifted": StatePending, "junk": StateUnreachable}
	for _, n := range rep.Nodes {
		if n.State != want[n.Name] {
			t.Errorf("%s: %s (%s), want %s", n.Name, n.State, n.Error, want[n.Name])
		}
	}
	if rep.Reference != "1.0.2" || rep.Err() == nil {
		t.Errorf("reference %s, err %v", rep.Reference, rep.Err())
	}
	// Without a repository a junk version cannot become the reference.
	if rep := Status(context.Background(), nodes[2:], StatusOptions{}); rep.Reference != "1.0.2" {
		t.Errorf("reference %s, want 1.0.2", rep.Reference)
	}
}

func serveHealth(t *testing.T, h *schema.Health, skew time.Duration) string {
	b, _ := json.Marshal(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skew != 0 {
			w.Header().Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		}
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/health"
}

func TestStatus(t *testing.T) {
	pending := health("1.0.2", true)
	pending.Pending = []manifests.ServiceAction{{Unit: "app.service", Action: manifests.ActionRestart}}
	failing := health("1.0.2", true)
	failing.Agent.LastApply = &schema.ApplyResult{Result: "failed", Reason: "health check failed"}
	restartFailed := health("1.0.2", true)
	restartFailed.Pending = []manifests.ServiceAction{{Unit: "app.service", Action: manifests.ActionRestart, Because: []string{"a restart failed: app.service is failed"}}}
	restartFailed.LastFailure = &manifests.LedgerEntry{Action: manifests.LedgerRestart, Version: "1.0.2", Time: "2026-12-03T10:00:00Z", Error: "service restart failed: app.service is failed"}
	badConfig := health("1.0.2", true)
	badConfig.Agent.ConfigValid, badConfig.Agent.Config = false, "config invalid: /etc/strata/agent.yaml: line 2: bad; following https://repo/ with the last good config until the file is fixed"
	// The agent says it is held before the node state it cached does.
	heldByAgent := health("1.0.1", true)
	heldByAgent.Agent.LastApply = &schema.ApplyResult{Result: "held", Reason: "held", Error: "node / is held at 1.0.1"}
	refused := health("1.0.2", true)
	refused.LayerIntegrity = &schema.LayerIntegrity{Mode: schema.LayersDigestChecked, Images: 2,
		Refused: &schema.LayerRefusal{Version: "1.0.2", Error: "sha256 x, its apply wrote y", Time: "2026-12-04T10:00:00Z"}}
	forged := health("1.0.2", true)
	forged.LayerIntegrity = &schema.LayerIntegrity{Mode: schema.LayersKernelVerified, Images: 2,
		Refused: &schema.LayerRefusal{Version: "1.0.1", Error: "the ledger records layer image sha256 x, its signed manifest y", Time: "2026-12-04T10:00:00Z", Cause: schema.RefusedRecord}}
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL + "/health"
	gone.Close()
	nodes := []Node{
		{Name: "a", Health: serveHealth(t, health("1.0.2", true), 0)},
		{Name: "b", Health: serveHealth(t, health("1.0.0", true), 0)},
		{Name: "c", Health: serveHealth(t, pending, 0)},
		{Name: "d", Health: serveHealth(t, health("1.0.2", false), 0)},
		{Name: "e", Health: serveHealth(t, failing, 0)},
		{Name: "f", Health: goneURL},
		{Name: "g"},
		{Name: "h", Health: serveHealth(t, health("1.0.2", true), 90*time.Second)},
		{Name: "i", Health: serveHealth(t, restartFailed, 0)},
		{Name: "j", Health: serveHealth(t, badConfig, 0)},
		{Name: "k", Health: serveHealth(t, heldByAgent, 0)},
		{Name: "l", Health: serveHealth(t, refused, 0)},
		{Name: "m", Health: serveHealth(t, forged, 0)},
	}
	rep := Status(context.Background(), nodes, StatusOptions{Line: refs("1.0.0", "1.0.1", "1.0.2"), LineName: "demo", Timeout: 5 * time.Second})
	want := map[string]struct {
		state  string
		behind int
		config int
	}{
		"a": {StateCurrent, 0, 1}, "b": {StateBehind, 2, 1}, "c": {StatePending, 0, 0}, "d": {StatePending, 0, 0},
		"e": {StateFailing, 0, 1}, "f": {StateUnreachable, -1, 0}, "g": {StateUnreachable, -1, 0}, "h": {StateCurrent, 0, 1},
		"i": {StatePending, 0, 0}, "j": {StateFailing, 0, 1}, "k": {StateHeld, 1, 1},
		"l": {StateFailing, 0, 0}, "m": {StateFailing, 0, 0},
	}
	for _, n := range rep.Nodes {
		w := want[n.Name]
		if n.State != w.state || n.Behind != w.behind || n.ConfigMatches != w.config {
			t.Errorf("%s: %s behind %d config %d (%s), want %s behind %d config %d", n.Name, n.State, n.Behind, n.ConfigMatches, n.Error, w.state, w.behind, w.config)
		}
		if n.Name == "h" && (n.Skew < 80*time.Second || n.Skew > 100*time.Second) {
			t.Errorf("h: skew %s, want about 90s", n.Skew)
		}
		// Every state but current carries a note saying why and what to
		// do next.
		if n.State != StateCurrent && n.Notes() == "" {
			t.Errorf("%s: %s with no note", n.Name, n.State)
		}
		if n.Name == "b" && !strings.Contains(n.Notes(), "2 overlays behind 1.0.2") {
			t.Errorf("b: note %q, want how far behind and what brings it there", n.Notes())
		}
		if n.Name == "e" && n.LastFailure != "apply failed: health check failed" {
			t.Errorf("e: last failure %q", n.LastFailure)
		}
		if n.Name == "j" && n.Error != "agent "+badConfig.Agent.Config {
			t.Errorf("j: note %q, want the agent's words on its config", n.Error)
		}
		if n.Name == "l" && !strings.Contains(n.Notes(), "layer 1.0.2 refused at activation") || n.Name == "l" && !strings.Contains(n.Notes(), "strata restart --repair") {
			t.Errorf("l: note %q, want the refused layer and the repair", n.Notes())
		}
		if n.Name == "m" && (!strings.Contains(n.Notes(), "layer 1.0.1 refused at activation") || !strings.Contains(n.Notes(), "verify-sequence") || strings.Contains(n.Notes(), "--repair")) {
			t.Errorf("m: note %q, want the refused record and the audit, not a repair", n.Notes())
		}
		if n.Name == "i" && n.LastFailure != "restart failed at 2026-12-03T10:00:00Z: service restart failed: app.service is failed; fix the unit, then strata restart settles the debt" {
			t.Errorf("i: last failure %q", n.LastFailure)
		}
	}
	if rep.Reference != "1.0.2" || len(rep.Nodes) != len(nodes) {
		t.Fatalf("reference %s, %d nodes", rep.Reference, len(rep.Nodes))
	}
	if err := rep.Err(); !errors.Is(err, ErrNotCurrent) || err.Error() != "not every node is at the head: 1 behind, 4 failing, 0 diverged, 2 unreachable of 13" {
		t.Errorf("Err = %v", err)
	}
	if s := rep.Sorted(); s[0].Name != "f" || s[len(s)-1].Name != "h" {
		t.Errorf("sorted: %s first, %s last", s[0].Name, s[len(s)-1].Name)
	}
	// Without a repository, the newest head any node reports is the
	// reference, and how far behind is unknown.
	rep = Status(context.Background(), nodes[:2], StatusOptions{})
	if rep.Reference != "1.0.2" || rep.Nodes[1].State != StateBehind || rep.Nodes[1].Behind != -1 {
		t.Errorf("no repository: reference %s, b %+v", rep.Reference, rep.Nodes[1])
	}
	// All current: no error.
	if err := Status(context.Background(), nodes[:1], StatusOptions{}).Err(); err != nil {
		t.Errorf("one current node: %v", err)
	}
}

// TestStatusHostile: a health endpoint that answers endlessly or with
// junk is an unreachable node, not a hang or a crash.
func TestStatusHostile(t *testing.T) {
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"head": "`))
		for i := 0; i < 10000; i++ {
			if _, err := w.Write(bytes.Repeat([]byte("x"), 1024)); err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	junk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }))
	defer junk.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(1500 * time.Millisecond) }))
	defer slow.Close()
	rep := Status(context.Background(), []Node{{Name: "endless", Health: endless.URL}, {Name: "junk", Health: junk.URL}, {Name: "slow", Health: slow.URL}}, StatusOptions{Timeout: 500 * time.Millisecond})
	for _, n := range rep.Nodes {
		if n.State != StateUnreachable || n.Error == "" {
			t.Errorf("%s: %s (%s), want unreachable with the reason", n.Name, n.State, n.Error)
		}
	}
}

// fakeTransport answers every health request in process, for scale.
type fakeTransport struct{ body []byte }

func (f fakeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Date": {time.Now().UTC().Format(http.TimeFormat)}}, Body: io.NopCloser(bytes.NewReader(f.body)), Request: r}, nil
}

// TestStatus1000Nodes: a status of 1,000 simulated nodes (an in-process
// transport) reports every one; the time is logged for
// docs/benchmarks.md, never asserted.
func TestStatus1000Nodes(t *testing.T) {
	b, _ := json.Marshal(health("1.0.2", true))
	nodes := make([]Node, 1000)
	for i := range nodes {
		nodes[i] = Node{Name: fmt.Sprintf("n%04d", i), Health: fmt.Sprintf("http://n%04d.test:9411/health", i)}
	}
	start := time.Now()
	rep := Status(context.Background(), nodes, StatusOptions{Client: &http.Client{Transport: fakeTransport{b}}})
	took := time.Since(start)
	if rep.Counts[StateCurrent] != 1000 || rep.Err() != nil {
		t.Fatalf("counts %v", rep.Counts)
	}
	t.Logf("status of 1000 simulated nodes: %v", took)
}

// TestPageEscapes: what nodes report reaches the page as text, never as
// markup; /status.json serves the report.
func TestPageEscapes(t *testing.T) {
	evil := health("1.0.1", true)
	evil.Agent.LastApply = &schema.ApplyResult{Result: "failed", Reason: `<script>alert(1)</script>`}
	nodes := []Node{{Name: "evil", Health: serveHealth(t, evil, 0)}}
	p := NewPage(nodes, PageOptions{Reference: func(context.Context) (string, []manifests.Ref, error) { return "demo", refs("1.0.0", "1.0.1"), nil }})
	srv := httptest.NewServer(p)
	defer srv.Close()
	if resp, err := http.Get(srv.URL + "/"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("before the first gathering: %v %v", resp.Status, err)
	}
	p.Gather(context.Background())
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(b)
	if bytes.Contains(b, []byte("<script>")) || !bytes.Contains(b, []byte("&lt;script&gt;")) {
		t.Errorf("the page does not escape a node's failure reason:\n%s", page)
	}
	if !bytes.Contains(b, []byte(`<tr data-node="evil" data-state="failing">`)) || !bytes.Contains(b, []byte(`http-equiv="refresh" content="10"`)) {
		t.Errorf("page:\n%s", page)
	}
	var rep Report
	resp, err = http.Get(srv.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || len(rep.Nodes) != 1 || rep.Nodes[0].State != StateFailing {
		t.Errorf("status.json: %+v %v", rep, err)
	}
}

// A node's health document of the wrong shape is named in the document's
// words, never Go's types.
func TestDecodeHealthWrongShape(t *testing.T) {
	_, err := decodeHealth([]byte(`{"head": 5}`), "n1", "200 OK")
	if err == nil || !strings.Contains(err.Error(), `n1: not a strata health document: "head": a JSON number where a mapping`) || strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "manifests.") {
		t.Errorf("%v", err)
	}
}
