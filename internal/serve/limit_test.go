package serve_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/serve"
)

// start serves a fixture repository within limits until the test ends.
func start(t *testing.T, l serve.Limits) string {
	t.Helper()
	dir, _, place := fixture(t)
	if err := os.WriteFile(place("index.json"), []byte(`{"stand-in":"index"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := serve.Listen("127.0.0.1:0", serve.Handler(dir, nil), l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx, time.Second); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s.Addr
}

// idleConn makes one keep-alive request on a connection of its own and
// leaves the connection open and idle.
func idleConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /index.json HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /index.json: %s", resp.Status)
	}
	return c
}

func getStatus(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// Issue 25: four idle keep-alive clients held every slot of a server
// limited to four connections, and a fifth client's index request waited
// for their 2-minute idle timeout. Now the longest-idle one is closed for
// it.
func TestIdleConnectionsYieldTheirSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (waits out the real idle timeout): make test runs it")
	}
	addr := start(t, serve.Limits{Conns: 4})
	var idle []net.Conn
	for range 4 {
		idle = append(idle, idleConn(t, addr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if code, err := getStatus(ctx, "http://"+addr+"/index.json"); err != nil || code != http.StatusOK {
		t.Fatalf("an index request beside four idle connections: %d %v", code, err)
	}
	closed := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) {
			closed++
		}
	}
	if closed == 0 {
		t.Error("no idle connection was closed, yet the request got through")
	}
}

// Nudge waits have their own pool: when it is full a wait gets 503 at
// once, and index requests still get through. One client address holds
// at most its share of waits, and apart from them its share of requests.
func TestNudgeWaitsAndClientShare(t *testing.T) {
	addr := start(t, serve.Limits{Conns: 32, Waits: 2, PerClient: 3})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Held until the test ends; a holder a probe beat to the
			// slot (503) or to the client's share (429) tries again.
			for ctx.Err() == nil {
				code, err := getStatus(ctx, "http://"+addr+"/nudge?line=demo&after=0")
				if err != nil || code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	deadline, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	// Probe until the pool is full: a probe that is held (a slot was
	// still free) gives up after a moment and frees it again.
	for {
		probe, pcancel := context.WithTimeout(deadline, 300*time.Millisecond)
		code, err := getStatus(probe, "http://"+addr+"/nudge?line=demo&after=0")
		pcancel()
		if deadline.Err() != nil {
			t.Fatal("the wait pool never filled")
		}
		if err == nil && code == http.StatusServiceUnavailable {
			break // both waits are held
		}
		if err == nil && code != http.StatusTooManyRequests {
			t.Fatalf("a third nudge wait: %d", code)
		}
	}
	// Two waits held from 127.0.0.1: its requests have a share of their
	// own, and one is served beside the full wait pool.
	if code, err := getStatus(deadline, "http://"+addr+"/index.json"); err != nil || code != http.StatusOK {
		t.Fatalf("an index request with the nudge waits full: %d %v", code, err)
	}
}

// The fleet at scale, modelled as agents are: 1,500 agents, each holding a
// nudge wait on a connection of its own and polling the index on another
// kept alive, against a server allowed 2,000 connections (the 3,000 they
// would hold do not fit; the wait pool, half of them, takes 1,000). Every
// poll must be answered: idle poll connections yield their slots, waits
// beyond their pool are refused with 503 (the agent falls back to
// polling), and no wait holds a poll's slot.
func TestFleetOfWaitingAgents(t *testing.T) {
	const agents = 1500
	addr := start(t, serve.Limits{Conns: 2000, PerClient: 2 * agents})
	ctx, cancel := context.WithCancel(context.Background())
	var waiting sync.WaitGroup
	var refused atomic.Int64
	for range agents {
		waiting.Add(1)
		go func() {
			defer waiting.Done()
			code, _ := getStatus(ctx, "http://"+addr+"/nudge?line=demo&after=0")
			if code == http.StatusServiceUnavailable {
				refused.Add(1)
			}
		}()
	}
	defer func() { cancel(); waiting.Wait() }()
	pollCtx, pollCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer pollCancel()
	var polls sync.WaitGroup
	var answered, failed atomic.Int64
	var firstErr atomic.Value
	for range agents {
		polls.Add(1)
		go func() {
			defer polls.Done()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for range 3 {
				req, _ := http.NewRequestWithContext(pollCtx, http.MethodGet, "http://"+addr+"/index.json", nil)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					answered.Add(1)
				} else {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, resp.Status)
				}
			}
		}()
	}
	polls.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d of %d polls failed (first: %v)", failed.Load(), 3*agents, firstErr.Load())
	}
	if refused.Load() == 0 {
		t.Error("no nudge wait was refused: the test did not fill the wait pool")
	}
	t.Logf("%d agents: %d polls answered, %d nudge waits refused at the pool's limit", agents, answered.Load(), refused.Load())
}

// When every connection holds a nudge wait, a poll still gets through:
// the oldest wait ends at once with 204 and Connection: close (its agent
// asks again a hold later), and its connection serves the poll.
func TestWaitsYieldToPolls(t *testing.T) {
	addr := start(t, serve.Limits{Conns: 3, Waits: 3, PerClient: 8})
	type answer struct {
		code  int
		close bool
		took  time.Duration
	}
	answers := make(chan answer, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/nudge?line=demo&after=0", nil)
			start := time.Now()
			resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Close, time.Since(start)}
		}()
		time.Sleep(200 * time.Millisecond) // in order: the first is the oldest
	}
	// With no client waiting for a connection, no wait gives way.
	select {
	case a := <-answers:
		t.Fatalf("a wait ended with no poll waiting (%+v): waits give way only on demand", a)
	case <-time.After(2 * time.Second):
	}
	deadline, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer dcancel()
	if code, err := getStatus(deadline, "http://"+addr+"/index.json"); err != nil || code != http.StatusOK {
		t.Fatalf("a poll with every connection in a nudge wait: %d %v", code, err)
	}
	select {
	case a := <-answers:
		if a.code != http.StatusNoContent || !a.close || a.took > serve.RelayWait/2 {
			t.Fatalf("the wait that gave way: %+v, want 204 at once with Connection: close", a)
		}
	case <-deadline.Done():
		t.Fatal("no wait gave its connection up")
	}
	select {
	case a := <-answers:
		t.Fatalf("a second wait ended (%+v): only one had to give way", a)
	case <-time.After(500 * time.Millisecond):
	}
}
