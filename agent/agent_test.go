package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/builder"
	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/registrytest"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/serve"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/node/nodetest"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
	"github.com/strata-dev/strata/tests/fixture"
)

// world is a line with a repository served over HTTP and a directory node
// at the line's image.
type world struct {
	t       *testing.T
	dir     string
	key     *sign.Key
	repo    string
	image   string // the line's image, for provisioning more nodes
	root    string
	srv     *httptest.Server
	down    atomic.Bool  // the server answers nothing but 503
	polls   atomic.Int32 // requests for index.json
	notMod  atomic.Int32 // of which answered 304
	version int
}

func newWorld(t *testing.T) *world {
	t.Helper()
	body := `line: demo
version: 1.0.0
epoch: 1700000000
files:
  - path: /etc/app/app.conf
    content: "port 80\n"
  - path: /usr/lib/systemd/system/app.service
    content: "[Service]\nExecStart=/usr/bin/app\n"
  - path: /usr/bin/app
    content: "#!/bin/sh\n"
    mode: "0755"
services:
  - unit: app.service
    paths: [/etc/app]
`
	f := fixture.New(t, fixture.WithRecipe(body, nil))
	w := &world{t: t, dir: f.Dir, key: f.Key, repo: f.Repo, image: f.Image, version: 0}
	w.root = filepath.Join(w.dir, "node")
	if _, err := builder.Provision(context.Background(), f.Image, w.root, nil); err != nil {
		t.Fatal(err)
	}
	inner := serve.Handler(w.repo, nil)
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.down.Load() {
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return
		}
		rec := &recorder{ResponseWriter: rw}
		inner.ServeHTTP(rec, r)
		if r.URL.Path == "/index.json" {
			w.polls.Add(1)
			if rec.code == http.StatusNotModified {
				w.notMod.Add(1)
			}
		}
	}))
	t.Cleanup(w.srv.Close)
	return w
}

type recorder struct {
	http.ResponseWriter
	code int
}

func (r *recorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// publish creates the next overlay (1.0.N) changing the app's config.
func (w *world) publish() string {
	w.t.Helper()
	w.version++
	v := "1.0." + strconv.Itoa(w.version)
	src := filepath.Join(w.dir, "app.conf."+v)
	if err := os.WriteFile(src, []byte("port "+strconv.Itoa(8000+w.version)+"\n"), 0o644); err != nil {
		w.t.Fatal(err)
	}
	if _, err := overlay.Create(context.Background(), w.repo, w.key, overlay.Change{Adds: []overlay.Add{{Dest: "/etc/app/app.conf", Src: src}}}, overlay.CreateOptions{Version: v}); err != nil {
		w.t.Fatal(err)
	}
	return v
}

// head returns the node's head version.
func (w *world) head() string {
	w.t.Helper()
	st, err := nodetest.Status(context.Background(), w.root)
	if err != nil {
		w.t.Fatal(err)
	}
	return st.Head.Version
}

// run starts an agent with cfg written to its config file; it stops when
// the test ends.
func (w *world) run(cfg string) (*agent.Agent, string, *logBuf) {
	w.t.Helper()
	path := filepath.Join(w.dir, "agent.yaml")
	if cfg != "" {
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	logs := &logBuf{}
	a := agent.New(agent.Options{Root: w.root, ConfigPath: path, Base: agent.Config{Jitter: 0, Interval: agent.Duration(time.Second)}, Log: logs.add})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			w.t.Errorf("agent: %v", err)
		}
	}()
	hs := httptest.NewServer(a.Handler())
	w.t.Cleanup(func() {
		cancel()
		<-done
		hs.Close()
	})
	return a, hs.URL, logs
}

type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// eventually waits (generously: these machines are shared) for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

func metrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Test 1: the agent follows a repository over HTTP, applying what is
// published in order; an unchanged poll is one request, answered 304.
func TestAgentFollowsHTTPRepository(t *testing.T) {
	w := newWorld(t)
	w.publish()
	w.publish()
	a, base, logs := w.run("repo: " + w.srv.URL + "/\ninterval: 1s\njitter: 0%\n")
	eventually(t, "the node at 1.0.2", func() bool { return w.head() == "1.0.2" })
	polls := w.polls.Load()
	eventually(t, "an unchanged poll", func() bool { return w.notMod.Load() >= 1 })
	// Each unchanged poll is a single request for the index, a 304.
	time.Sleep(2500 * time.Millisecond)
	if extra, nm := w.polls.Load()-polls, w.notMod.Load(); extra != nm {
		t.Errorf("%d index requests after the apply, %d answered 304; want all 304", extra, nm)
	}
	v := w.publish()
	eventually(t, "the node at "+v, func() bool { return w.head() == v })
	var h schema.Health
	eventually(t, "health at "+v, func() bool { // health is read at most every 2s
		h = schema.Health{}
		return getJSON(t, base+"/health", &h) == 200 && h.Head.Version == v
	})
	if h.Line != "demo" || h.Agent.LastApply == nil || h.Agent.LastApply.Result != "ok" {
		t.Errorf("health: %+v", h)
	}
	if len(h.Configs) != 1 || h.Configs[0].Path != "etc/app/app.conf" || h.Configs[0].SHA256 != h.Configs[0].Expected || h.Configs[0].ModTime.IsZero() {
		t.Errorf("health configs: %+v", h.Configs)
	}
	if h.IndexSerial == 0 || h.LedgerDigest == "" || h.NodeID == "" {
		t.Errorf("health lacks serial, ledger digest or node id: %+v", h)
	}
	wants := []string{
		`strata_head_info{digest="` + h.Head.Digest + `",image="1.0.0",line="demo",version="` + v + `"} 1`,
		"strata_overlays_applied_total 3",
		`strata_service_config_current{unit="app.service"} 0`, // restarts are pending: no restarter
		"strata_pending_restarts 1",
		"strata_tree_matches_head 1",
		"strata_agent_config_valid 1",
		"strata_seconds_since_last_poll ",
		"strata_build_info{",
	}
	// The head moves when the ledger commits; the agent counts the apply
	// when Apply returns, a moment later.
	var m string
	lacking := func() []string {
		m = metrics(t, base)
		var out []string
		for _, want := range wants {
			if !strings.Contains(m, want) {
				out = append(out, want)
			}
		}
		return out
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(lacking()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if l := lacking(); len(l) > 0 {
		t.Errorf("metrics lack %q:\n%s", l, m)
	}
	if st := a.State(); st.Failures != 0 {
		t.Errorf("failures %d after a clean run; log:\n%s", st.Failures, logs)
	}
}

// Test 3: a rolled-back index (an older serial, validly signed) and an
// expired one are refused, named in health and metrics, and the node is
// untouched.
func TestAgentRefusesStaleIndexes(t *testing.T) {
	w := newWorld(t)
	w.publish()
	oldRaw, _ := os.ReadFile(filepath.Join(w.repo, repo.IndexFile))
	oldSig, _ := os.ReadFile(filepath.Join(w.repo, repo.SigPath(repo.IndexFile)))
	w.publish()
	_, base, _ := w.run("repo: " + w.srv.URL + "\ninterval: 1s\njitter: 0%\n")
	eventually(t, "the node at 1.0.2", func() bool { return w.head() == "1.0.2" })
	ledger, _ := os.ReadFile(filepath.Join(w.root, manifests.LedgerPath))

	// Rollback: serial 2 replayed (after the node accepted 3).
	putIndex(t, w.repo, oldRaw, oldSig)
	eventually(t, "the rollback reported", func() bool {
		var h schema.Health
		getJSON(t, base+"/health", &h)
		return h.Agent.LastApply != nil && h.Agent.LastApply.Reason == "index_rollback"
	})
	if m := metrics(t, base); !strings.Contains(m, `strata_apply_failures_total{reason="index_rollback"} `) || strings.Contains(m, `strata_apply_failures_total{reason="index_rollback"} 0`) {
		t.Errorf("metrics do not count the rollback:\n%s", m)
	}
	if code := getJSON(t, base+"/health", nil); code != http.StatusServiceUnavailable {
		t.Errorf("health after a refused index: %d, want 503", code)
	}

	// Freeze: an authentic, newer index past its expiry.
	var x manifests.Index
	if err := manifests.Decode(oldRaw, &x); err != nil {
		t.Fatal(err)
	}
	x.Serial = 10
	x.Expires = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	raw, _ := manifests.Encode(&x)
	putIndex(t, w.repo, raw, w.key.Sign(raw, sign.IndexComment))
	eventually(t, "the expiry reported", func() bool {
		var h schema.Health
		getJSON(t, base+"/health", &h)
		return h.Agent.LastApply != nil && h.Agent.LastApply.Reason == "index_expired"
	})
	now, _ := os.ReadFile(filepath.Join(w.root, manifests.LedgerPath))
	if string(now) != string(ledger) || w.head() != "1.0.2" {
		t.Errorf("the node changed while refusing stale indexes")
	}
}

func putIndex(t *testing.T, dir string, raw, sig []byte) {
	t.Helper()
	// The signature first, as a publisher writes it: a reader in between
	// sees a pair that does not verify, and tries again.
	if err := os.WriteFile(filepath.Join(dir, repo.SigPath(repo.IndexFile)), sig, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, repo.IndexFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Test 4: the server goes away mid-run and comes back: the agent backs
// off, recovers, and applies what it missed, in order.
func TestAgentBacksOffAndRecovers(t *testing.T) {
	w := newWorld(t)
	a, base, logs := w.run("repo: " + w.srv.URL + "\ninterval: 1s\njitter: 0%\nmax_backoff: 4s\n")
	eventually(t, "a first poll", func() bool { return !a.State().LastPoll.IsZero() })
	w.down.Store(true)
	w.publish()
	w.publish()
	eventually(t, "two failed polls", func() bool { return a.State().Failures >= 2 })
	if st := a.State(); time.Until(st.NextPoll) > 5*time.Second {
		t.Errorf("next poll in %s: beyond max_backoff", time.Until(st.NextPoll))
	}
	if m := metrics(t, base); !strings.Contains(m, `strata_polls_total{result="error"}`) {
		t.Errorf("metrics lack failed polls:\n%s", m)
	}
	// Issue 25: /health stayed 200 and said nothing of the outage. It
	// stays 200 (the node serves as before) and says since when, and the
	// metric says for how long.
	if st := a.State(); st.UnreachableSince.IsZero() || st.UnreachableSeconds <= 0 {
		t.Errorf("state during the outage: unreachable since %v (%v s), want both set", st.UnreachableSince, st.UnreachableSeconds)
	}
	if m := metrics(t, base); !regexp.MustCompile(`(?m)^strata_repo_unreachable_seconds [0-9.e+-]+$`).MatchString(m) || strings.Contains(m, "strata_repo_unreachable_seconds 0\n") {
		t.Errorf("metrics lack a non-zero strata_repo_unreachable_seconds:\n%s", m)
	}
	w.down.Store(false)
	eventually(t, "the node at 1.0.2", func() bool { return w.head() == "1.0.2" })
	// The head moves when the ledger commits, a moment before the agent
	// records the success.
	eventually(t, "failures cleared after recovering", func() bool { return a.State().Failures == 0 })
	if st := a.State(); !st.UnreachableSince.IsZero() || st.UnreachableSeconds != 0 {
		t.Errorf("after recovering: unreachable since %v (%v s), want cleared", st.UnreachableSince, st.UnreachableSeconds)
	}
	// In order: the ledger records 1.0.1 then 1.0.2.
	st, _ := nodetest.Status(context.Background(), w.root)
	if strings.Join(st.Layers, ",") != "1.0.1,1.0.2" {
		t.Errorf("layers %v, want 1.0.1,1.0.2", st.Layers)
	}
	if !strings.Contains(logs.String(), "poll of") {
		t.Errorf("the log does not record the failed polls:\n%s", logs)
	}
}

// Test 5: a signed nudge makes the agent apply at once; an unsigned, a
// wrongly signed, a replayed or a stale one is refused and changes
// nothing.
func TestAgentNudges(t *testing.T) {
	w := newWorld(t)
	a, base, _ := w.run("repo: " + w.srv.URL + "\ninterval: 1h\njitter: 0%\n")
	eventually(t, "a first poll", func() bool { return !a.State().LastPoll.IsZero() })
	v := w.publish()
	time.Sleep(1500 * time.Millisecond)
	if w.head() == v {
		t.Fatal("applied without a nudge (interval 1h)")
	}
	other, err := func() (*sign.Key, error) {
		p := filepath.Join(w.dir, "other")
		if err := sign.Generate(p); err != nil {
			return nil, err
		}
		return sign.LoadKey(p + ".key")
	}()
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := nudge.Sign(other, "demo", time.Now())
	stale, _ := nudge.Sign(w.key, "demo", time.Now().Add(-time.Hour))
	wrongLine, _ := nudge.Sign(w.key, "other", time.Now())
	forged, _ := nudge.Sign(w.key, "demo", time.Now())
	forged.Time++ // the signature no longer covers it
	for name, n := range map[string]*nudge.Nudge{"untrusted key": bad, "stale": stale, "other line": wrongLine, "altered": forged, "unsigned": {Line: "demo", Time: time.Now().Unix()}} {
		if err := nudge.Send(context.Background(), base, n); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s nudge: %v, want 403", name, err)
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if w.head() == v {
		t.Fatal("a refused nudge made the agent apply")
	}
	good, _ := nudge.Sign(w.key, "demo", time.Now())
	if err := nudge.Send(context.Background(), base, good); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the nudged apply", func() bool { return w.head() == v })
	if err := nudge.Send(context.Background(), base, good); err == nil {
		t.Error("a replayed nudge was taken")
	}
	if m := metrics(t, base); !strings.Contains(m, `strata_nudges_total{result="refused"} 6`) || !strings.Contains(m, `strata_nudges_total{result="taken"} 1`) {
		t.Errorf("nudge metrics:\n%s", m)
	}
}

// Test 6: a missing or corrupted configuration keeps the agent up,
// reporting it, and it recovers by itself when the file is fixed.
func TestAgentSurvivesBadConfig(t *testing.T) {
	w := newWorld(t)
	w.publish()
	a, base, _ := w.run("")
	eventually(t, "not configured", func() bool { return strings.HasPrefix(a.State().Config, "not configured") })
	path := filepath.Join(w.dir, "agent.yaml")
	for _, bad := range []string{"repo: [", "repo: ftp://x/\n", "repo: " + w.srv.URL + "\ninterval: soon\n", "repo: " + w.srv.URL + "\nintervall: 1s\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		a.Wake()
		eventually(t, "config invalid for "+bad, func() bool { return strings.HasPrefix(a.State().Config, "config invalid") })
		var h schema.Health
		if code := getJSON(t, base+"/health", &h); code != http.StatusServiceUnavailable || !strings.HasPrefix(h.Agent.Config, "config invalid") {
			t.Errorf("health with %q: %d %q", bad, code, h.Agent.Config)
		}
		if m := metrics(t, base); !strings.Contains(m, "strata_agent_config_valid 0") {
			t.Errorf("metrics with %q do not say the config is invalid", bad)
		}
	}
	if w.head() != "1.0.0" {
		t.Fatal("applied with an invalid configuration")
	}
	if err := os.WriteFile(path, []byte("repo: "+w.srv.URL+"\ninterval: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node at 1.0.1 once the config is fixed", func() bool { return w.head() == "1.0.1" })
	if !a.State().ConfigValid {
		t.Error("config still reported invalid")
	}

	// Broken again after it was good: the node follows its line on the
	// last good config, and says the file is bad, until it is fixed.
	if err := os.WriteFile(path, []byte("repo: "+w.srv.URL+"\ninterval: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Wake()
	eventually(t, "config invalid, on the last good one", func() bool {
		c := a.State().Config
		return strings.HasPrefix(c, "config invalid") && strings.Contains(c, "with the last good config")
	})
	v := w.publish()
	eventually(t, "the node at "+v+" with its config broken", func() bool { return w.head() == v })
	var h schema.Health
	if code := getJSON(t, base+"/health", &h); code != http.StatusServiceUnavailable || !strings.Contains(h.Agent.Config, "agent.yaml: line 2: \"soon\"") || h.Agent.ConfigValid {
		t.Errorf("health with a broken config on the last good one: %d %q", code, h.Agent.Config)
	}
	if m := metrics(t, base); !strings.Contains(m, "strata_agent_config_valid 0") {
		t.Error("metrics do not say the config file is invalid")
	}
	if err := os.WriteFile(path, []byte("repo: "+w.srv.URL+"\ninterval: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Wake()
	eventually(t, "config valid again", func() bool { return a.State().ConfigValid })
}

// Test 2: the same through a real registry (oci://, on loopback): the
// agent applies what is pushed, in order, and an unchanged poll is one
// request, resolving the tag.
func TestAgentFollowsRegistry(t *testing.T) {
	w := newWorld(t)
	addr := registrytest.Start(t)
	var mu sync.Mutex
	var requests []string
	target, _ := url.Parse("http://" + addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path)
		mu.Unlock()
		proxy.ServeHTTP(rw, r)
	}))
	defer front.Close()
	ref := "oci://" + strings.TrimPrefix(front.URL, "http://") + "/strata/demo"
	push := func() {
		if _, err := repo.Push(context.Background(), w.repo, ref, nil); err != nil {
			t.Fatal(err)
		}
	}
	push()
	_, _, logs := w.run("repo: " + ref + "\ninterval: 1s\njitter: 0%\n")
	w.publish()
	w.publish()
	push()
	eventually(t, "the node at 1.0.2", func() bool { return w.head() == "1.0.2" })
	led, err := os.ReadFile(filepath.Join(w.root, manifests.LedgerPath))
	if err != nil || !strings.Contains(string(led), `"1.0.1"`) {
		t.Fatalf("ledger: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // let any apply in flight finish its requests
	mu.Lock()
	mark := len(requests)
	mu.Unlock()
	time.Sleep(2500 * time.Millisecond)
	mu.Lock()
	idle := append([]string{}, requests[mark:]...)
	mu.Unlock()
	if len(idle) == 0 {
		t.Fatalf("no poll in 2.5s at a 1s interval; log:\n%s", logs)
	}
	for _, r := range idle {
		if r != "HEAD /v2/strata/demo/manifests/latest" {
			t.Errorf("an unchanged poll made %q; want only HEAD of the tag", r)
		}
	}
}

// Nudges through the repository's server: strata serve relays a nudge the
// line's keys verify to the agents waiting on it, which take it at once;
// one the line's keys do not verify is refused by the server.
func TestAgentNudgedThroughServer(t *testing.T) {
	w := newWorld(t)
	a, _, _ := w.run("repo: " + w.srv.URL + "\ninterval: 1h\njitter: 0%\n")
	eventually(t, "a first poll", func() bool { return !a.State().LastPoll.IsZero() })
	v := w.publish()
	p := filepath.Join(w.dir, "other")
	if err := sign.Generate(p); err != nil {
		t.Fatal(err)
	}
	other, err := sign.LoadKey(p + ".key")
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := nudge.Sign(other, "demo", time.Now())
	if err := nudge.Send(context.Background(), w.srv.URL, bad); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("the server relayed a nudge signed by an untrusted key: %v", err)
	}
	time.Sleep(1500 * time.Millisecond)
	if w.head() == v {
		t.Fatal("applied without a trusted nudge (interval 1h)")
	}
	good, _ := nudge.Sign(w.key, "demo", time.Now())
	if err := nudge.Send(context.Background(), w.srv.URL, good); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the apply the relayed nudge asked for", func() bool { return w.head() == v })
}

// A relay that answers every nudge wait with 204 at once is asked again
// only after the hold time it cut short: the agent does not loop on it.
func TestAgentRelayAnsweringAtOnce(t *testing.T) {
	w := newWorld(t)
	var waits atomic.Int64
	inner := w.srv.Config.Handler
	w.srv.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/nudge" {
			waits.Add(1)
			rw.WriteHeader(http.StatusNoContent)
			return
		}
		inner.ServeHTTP(rw, r)
	})
	a, _, _ := w.run("repo: " + w.srv.URL + "\ninterval: 1h\njitter: 0%\n")
	eventually(t, "a first poll", func() bool { return !a.State().LastPoll.IsZero() })
	eventually(t, "a first nudge wait", func() bool { return waits.Load() >= 1 })
	time.Sleep(2 * time.Second)
	if n := waits.Load(); n > 1 {
		t.Errorf("%d nudge waits in 2 s on a relay answering at once, want 1 (the next after the hold, 55 s)", n)
	}
}

// An operator's hold holds (issue 22): the agent leaves a held node where
// it is, says so in its health (200: held is not failing), and the fleet
// view shows it held, with the reason; released, the node follows its
// line at the next poll.
func TestAgentLeavesHeldNode(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.publish()
	n, err := node.Open(w.root, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Hold(ctx, "waiting for the vendor"); err != nil {
		t.Fatal(err)
	}
	a, base, _ := w.run("repo: " + w.srv.URL + "\ninterval: 1s\njitter: 0%\n")
	eventually(t, "the agent seeing the hold", func() bool {
		la := a.State().LastApply
		return la != nil && la.Result == "held"
	})
	polls := w.polls.Load()
	w.publish()
	eventually(t, "two more polls", func() bool { return w.polls.Load() >= polls+2 })
	if w.head() != "1.0.0" {
		t.Fatalf("the agent moved a held node to %s", w.head())
	}
	var h schema.Health
	eventually(t, "health saying held", func() bool {
		h = schema.Health{}
		return getJSON(t, base+"/health", &h) == http.StatusOK && h.Held != nil
	})
	if h.Held.Reason != "waiting for the vendor" || h.Held.Head.Version != "1.0.0" || !strings.Contains(h.Agent.LastApply.Error, "held at 1.0.0") {
		t.Errorf("health: held %+v, last apply %+v", h.Held, h.Agent.LastApply)
	}
	rep := fleet.Status(ctx, []fleet.Node{{Name: "n", Health: base + "/health"}}, fleet.StatusOptions{})
	if r := rep.Nodes[0]; r.State != fleet.StateHeld || !strings.Contains(r.Error, "waiting for the vendor") || !strings.Contains(r.Error, "strata release") {
		t.Errorf("fleet row %+v, want held with the reason and the way out", r)
	}
	if _, err := n.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node at 1.0.2 once released", func() bool { return w.head() == "1.0.2" })
}

// Without --config the agent reads its node's own configuration, below
// its root, never the host's; a link on the way there is not followed
// (the node's tree cannot point the agent at another file).
func TestAgentReadsTheNodesOwnConfig(t *testing.T) {
	w := newWorld(t)
	w.publish()
	etc := filepath.Join(w.root, "etc/strata")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(w.dir, "elsewhere.yaml")
	if err := os.WriteFile(elsewhere, []byte("repo: "+w.srv.URL+"\ninterval: 1s\njitter: 0%\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(etc, "agent.yaml")); err != nil {
		t.Fatal(err)
	}
	a := agent.New(agent.Options{Root: w.root, Base: agent.Config{Jitter: 0, Interval: agent.Duration(time.Second)}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "the agent to refuse the linked config", func() bool {
		st := a.State()
		return strings.HasPrefix(st.Config, "config invalid") && strings.Contains(st.Config, filepath.Join(w.root, "etc/strata/agent.yaml")) &&
			strings.Contains(st.Config, "symbolic link")
	})
	if w.head() != "1.0.0" {
		t.Fatal("the agent followed the link to a config outside the node")
	}
	if err := os.Remove(filepath.Join(etc, "agent.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(elsewhere, filepath.Join(etc, "agent.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the agent to follow its node's own config", func() bool { return w.head() == "1.0.1" })
}
