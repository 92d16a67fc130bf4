package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/manifests"
)

// fakeNode is a node behind an in-process SSH server: strata health
// reports its head, apply-overlay moves it to --through (or fails).
type fakeNode struct {
	mu      sync.Mutex
	head    string
	fail    bool
	applied int
	stdin   int
	onApply func() // called as apply-overlay runs
	held    string // the reason of its hold, if held
}

var testLine = []manifests.Ref{{Version: "1.0.0", Digest: "sha256:00"}, {Version: "1.0.1", Digest: "sha256:01"}, {Version: "1.0.2", Digest: "sha256:02"}}

func digestOf(v string) string {
	for _, r := range testLine {
		if r.Version == v {
			return r.Digest
		}
	}
	return "sha256:ff"
}

func (f *fakeNode) handle(cmd string, stdin []byte) reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case strings.Contains(cmd, "'health'"):
		held := ""
		if f.held != "" {
			held = fmt.Sprintf(`,"held":{"schema":1,"kind":"hold","head":{"version":%q,"digest":%q},"reason":%q,"since":"2026-12-03T10:00:00Z"}`, f.head, digestOf(f.head), f.held)
		}
		return reply{stdout: fmt.Sprintf(`{"root":"/","line":"l","head":{"version":%q,"digest":%q}%s}`, f.head, digestOf(f.head), held)}
	case strings.Contains(cmd, "'apply-overlay'"):
		f.applied++
		f.stdin += len(stdin)
		if f.onApply != nil {
			f.onApply()
		}
		if f.fail {
			return reply{stderr: `{"error":"health check of x.service failed","exit_code":5}`, status: 5}
		}
		i := strings.Index(cmd, "'--through' '")
		f.head = strings.SplitN(cmd[i+len("'--through' '"):], "'", 2)[0]
		return reply{stdout: fmt.Sprintf(`{"to":{"version":%q}}`, f.head)}
	}
	return reply{stderr: "unknown " + cmd, status: 2}
}

// fakeFleet starts n fake nodes at head and returns them, their inventory
// and SSH settings.
func fakeFleet(t testing.TB, n int, head string) ([]*fakeNode, []Node, *SSH) {
	dir := t.TempDir()
	id, pub := clientKey(t, dir)
	var fakes []*fakeNode
	var nodes []Node
	var known strings.Builder
	for i := range n {
		f := &fakeNode{head: head}
		srv := newSSHServer(t, pub, f.handle)
		host, port, _ := net.SplitHostPort(srv.addr)
		fmt.Fprintf(&known, "[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(srv.hostKey))
		fakes = append(fakes, f)
		nodes = append(nodes, Node{Name: fmt.Sprintf("n%02d", i), Address: srv.addr})
	}
	kh := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(kh, []byte(known.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return fakes, nodes, &SSH{KnownHosts: kh, Identities: []string{id}, Timeout: 5 * time.Second}
}

// Waves of the right sizes, one bundle per starting version, nodes at
// the target left alone, every node at the target in the end.
func TestRolloutWavesAndBundles(t *testing.T) {
	fakes, nodes, s := fakeFleet(t, 12, "1.0.0")
	fakes[3].head = "1.0.1"
	fakes[7].head = "1.0.2"
	var bundles atomic.Int32
	dir := t.TempDir()
	o := RolloutOptions{WaveOptions: WaveOptions{Canary: 2, MaxUnavailable: 4, HealthTimeout: 10 * time.Second}, SSH: s, LineName: "l", Line: testLine, Target: "1.0.2",
		Transfer: Transfer{Bundle: func(_ context.Context, line, from, to string) (string, error) {
			bundles.Add(1)
			p := filepath.Join(dir, from+"-"+to)
			return p, os.WriteFile(p, []byte(strings.Repeat("b", 5000)), 0o600)
		}}}
	rep, err := Rollout(context.Background(), nodes, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Err() != nil || rep.Counts[OutcomeUpdated] != 11 || rep.Counts[OutcomeCurrent] != 1 {
		t.Fatalf("report %+v, err %v", rep.Counts, rep.Err())
	}
	waves := map[int]int{}
	for i, r := range rep.Nodes {
		waves[r.Wave]++
		if f := fakes[i]; f.head != "1.0.2" || (i == 7) != (f.applied == 0) || (i != 7 && f.stdin != 5000) {
			t.Errorf("%s: head %s, %d applies, %d bytes of bundle", r.Name, f.head, f.applied, f.stdin)
		}
	}
	// 11 to update: the canary wave of 2, then waves of 4, 4 and 1.
	if waves[1] != 2 || waves[2] != 4 || waves[3] != 4 || waves[4] != 1 || waves[0] != 1 {
		t.Errorf("waves %v", waves)
	}
	if bundles.Load() != 2 {
		t.Errorf("%d bundles written, want 2 (from 1.0.0 and from 1.0.1)", bundles.Load())
	}
	// A rerun converges: nothing to do.
	rep, err = Rollout(context.Background(), nodes, o)
	if err != nil || rep.Counts[OutcomeCurrent] != 12 {
		t.Fatalf("rerun: %+v, %v", rep.Counts, err)
	}
}

// A failure in the canary wave halts the rollout: no other node is
// touched, every node is in the report, and the error says so.
func TestRolloutHaltsOnCanaryFailure(t *testing.T) {
	fakes, nodes, s := fakeFleet(t, 5, "1.0.0")
	fakes[0].fail = true
	o := RolloutOptions{WaveOptions: WaveOptions{Canary: 1, MaxUnavailable: 2}, SSH: s, LineName: "l", Line: testLine, Target: "1.0.1",
		Transfer: Transfer{URL: "https://repo.example.net/"}}
	rep, err := Rollout(context.Background(), nodes, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Nodes[0].Outcome != OutcomeFailed || !strings.Contains(rep.Nodes[0].Error, "health check of x.service") {
		t.Errorf("canary: %+v", rep.Nodes[0])
	}
	for i, f := range fakes[1:] {
		if f.applied != 0 || rep.Nodes[i+1].Outcome != OutcomeSkipped {
			t.Errorf("%s: %d applies, %s", rep.Nodes[i+1].Name, f.applied, rep.Nodes[i+1].Outcome)
		}
	}
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "halted after canary wave 1") {
		t.Errorf("Err: %v", err)
	}
}

// An interrupted rollout (SIGINT cancels the context) finishes no later
// wave: the nodes after the one being updated are not contacted, they are
// skipped as interrupted, and the report's error says so.
func TestRolloutInterrupted(t *testing.T) {
	fakes, nodes, s := fakeFleet(t, 4, "1.0.0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fakes[0].onApply = cancel
	o := RolloutOptions{WaveOptions: WaveOptions{Canary: 1, MaxUnavailable: 2}, SSH: s, LineName: "l", Line: testLine, Target: "1.0.1",
		Transfer: Transfer{URL: "https://repo.example.net/"}}
	rep, err := Rollout(ctx, nodes, o)
	if err != nil {
		t.Fatal(err)
	}
	if fakes[0].applied != 1 {
		t.Errorf("canary: %d applies", fakes[0].applied)
	}
	for i, f := range fakes[1:] {
		if r := rep.Nodes[i+1]; f.applied != 0 || r.Outcome != OutcomeSkipped || r.Error != "interrupted during canary wave 1" {
			t.Errorf("%s: %d applies, %s: %s", r.Name, f.applied, r.Outcome, r.Error)
		}
	}
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "interrupted during canary wave 1") {
		t.Errorf("Err: %v", err)
	}
	if r := rep.Nodes[0]; r.Outcome != OutcomeFailed || !strings.Contains(r.Error, "interrupted") || !strings.Contains(r.Error, "strata status") {
		t.Errorf("canary: %s: %s", r.Outcome, r.Error)
	}
}

// Nodes off the line or past the target are failed, not touched.
func TestRolloutRefusesDivergedNodes(t *testing.T) {
	fakes, nodes, s := fakeFleet(t, 3, "1.0.0")
	fakes[1].head = "1.0.2"
	fakes[2].head = "9.9.9"
	o := RolloutOptions{WaveOptions: WaveOptions{MaxUnavailable: 3}, SSH: s, LineName: "l", Line: testLine, Target: "1.0.1",
		Transfer: Transfer{URL: "https://repo.example.net/"}}
	rep, err := Rollout(context.Background(), nodes, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Nodes[0].Outcome != OutcomeUpdated || rep.Nodes[1].Outcome != OutcomeFailed || !strings.Contains(rep.Nodes[1].Error, "past the target") ||
		rep.Nodes[2].Outcome != OutcomeFailed || !strings.Contains(rep.Nodes[2].Error, "not in the repository's line") {
		t.Errorf("%+v", rep.Nodes)
	}
	if fakes[1].applied+fakes[2].applied != 0 {
		t.Error("a diverged node was touched")
	}
}

// BenchmarkRollout200 rolls one overlay out to 200 simulated nodes
// (in-process SSH servers on loopback: the cost is strata's own, SSH
// handshakes included, not the nodes'), 25% at a time.
// It reports the process's CPU time beside the wall time (cpu-ms/op).
func BenchmarkRollout200(b *testing.B) {
	var cpu testenv.CPUClock
	n := 0
	for b.Loop() {
		b.StopTimer()
		_, nodes, s := fakeFleet(b, 200, "1.0.0")
		o := RolloutOptions{WaveOptions: WaveOptions{MaxUnavailable: 50, Parallel: 16}, SSH: s, LineName: "l", Line: testLine, Target: "1.0.1",
			Transfer: Transfer{URL: "https://repo.example.net/"}}
		b.StartTimer()
		cpu.Start()
		rep, err := Rollout(context.Background(), nodes, o)
		cpu.Stop()
		n++
		if err != nil || rep.Counts[OutcomeUpdated] != 200 {
			b.Fatalf("%v %v", rep.Counts, err)
		}
	}
	cpu.Report(b, n)
}

// An agent that takes the nudged overlays back fails its node at once,
// not after the health timeout; a failed apply from before the nudge does
// not count.
func TestRolloutViaAgentFailsFast(t *testing.T) {
	var nudged atomic.Bool
	old := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/nudge":
			nudged.Store(true)
			w.WriteHeader(http.StatusAccepted)
		case "/health":
			when := old
			if nudged.Load() {
				when = old.Add(time.Hour)
			}
			fmt.Fprintf(w, `{"line":"l","head":{"version":"1.0.0","digest":"sha256:00"},"agent":{"config_valid":true,"last_apply":{"time":%q,"result":"failed","reason":"restart","error":"health check of x.service failed"}}}`, when.Format(time.RFC3339))
		}
	}))
	defer srv.Close()
	nodes := []Node{{Name: "a", Health: srv.URL + "/health"}}
	o := RolloutOptions{WaveOptions: WaveOptions{MaxUnavailable: 1, HealthTimeout: time.Hour}, LineName: "l", Line: testLine[:2], Target: "1.0.1",
		Nudge: func() (*nudge.Nudge, error) { return &nudge.Nudge{}, nil }}
	done := make(chan *RolloutReport, 1)
	go func() {
		rep, err := Rollout(context.Background(), nodes, o)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	select {
	case rep := <-done:
		if rep == nil || rep.Nodes[0].Outcome != OutcomeFailed || !strings.Contains(rep.Nodes[0].Error, "the agent's apply failed") {
			t.Fatalf("%+v", rep)
		}
	case <-time.After(time.Minute):
		t.Fatal("the failed apply was not noticed")
	}
}

// A rollout skips a held node, naming its hold and the way out, and
// updates the others (issue 22).
func TestRolloutSkipsHeldNodes(t *testing.T) {
	fakes, nodes, s := fakeFleet(t, 3, "1.0.0")
	fakes[1].held = "rolled back 1.0.1 by strata rollback"
	dir := t.TempDir()
	o := RolloutOptions{WaveOptions: WaveOptions{MaxUnavailable: 3, HealthTimeout: 10 * time.Second}, SSH: s, LineName: "l", Line: testLine, Target: "1.0.2",
		Transfer: Transfer{Bundle: func(_ context.Context, line, from, to string) (string, error) {
			p := filepath.Join(dir, from+"-"+to)
			return p, os.WriteFile(p, []byte("b"), 0o600)
		}}}
	rep, err := Rollout(context.Background(), nodes, o)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Nodes[1]
	if r.Outcome != OutcomeSkipped || !strings.Contains(r.Error, "held at 1.0.0") || !strings.Contains(r.Error, "rolled back 1.0.1") || !strings.Contains(r.Error, "strata release") || fakes[1].applied != 0 {
		t.Errorf("held node: %+v, %d applies; want skipped, naming the hold", r, fakes[1].applied)
	}
	if rep.Counts[OutcomeUpdated] != 2 || rep.Err() == nil {
		t.Errorf("counts %v, err %v: want the two others updated and the rollout not done", rep.Counts, rep.Err())
	}
}
