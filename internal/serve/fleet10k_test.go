package serve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/serve"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("STRATA_TEST_SERVE"); dir != "" {
		serveChild(dir)
	}
	os.Exit(m.Run())
}

// fleetAgent is one simulated agent: its own loopback address (as a
// fleet's nodes have their own), a nudge wait held on a connection of its
// own, and index polls on another kept alive, conditional as the agent's
// are.
type fleetAgent struct {
	wait, poll *http.Client
}

func newFleetAgent(addr int) *fleetAgent {
	ip := net.IPv4(127, 1, byte(addr/250), byte(addr%250+1))
	tr := func(keepAlive bool) *http.Transport {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: time.Minute}
		return &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, DisableCompression: true, DisableKeepAlives: !keepAlive}
	}
	// An agent polls every two minutes, and the server closes a
	// connection idle for two: its poll connection is new each time.
	return &fleetAgent{wait: &http.Client{Transport: tr(true)}, poll: &http.Client{Transport: tr(false)}}
}

// fleetRun holds n agents' nudge waits on a server at addr and has every
// agent poll the index rounds times while they are held, at most
// parallel polls at once (a fleet's polls spread over time). perAddr
// agents share a client address (1: each its own; more: behind a NAT).
// It returns how the waits and the polls were answered.
type fleetRun struct {
	held, refused, yielded atomic.Int64
	polls, failed          atomic.Int64
	firstErr               atomic.Value
}

func runFleet(t *testing.T, addr string, n, rounds, parallel, perAddr int) *fleetRun {
	t.Helper()
	agents := make([]*fleetAgent, n)
	for i := range agents {
		agents[i] = newFleetAgent(i / perAddr)
	}
	defer func() {
		for _, a := range agents {
			a.wait.CloseIdleConnections()
			a.poll.CloseIdleConnections()
		}
	}()
	run := &fleetRun{}
	ctx, cancel := context.WithCancel(context.Background())
	var waits sync.WaitGroup
	for _, a := range agents {
		waits.Add(1)
		go func() {
			defer waits.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/nudge?line=demo&after=0", nil)
			start := time.Now()
			resp, err := a.wait.Do(req)
			if err != nil {
				return // the test ended it
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests:
				run.refused.Add(1)
			case resp.StatusCode == http.StatusNoContent && time.Since(start) < serve.RelayWait-time.Second:
				run.yielded.Add(1) // gave its connection to a poll
			}
		}()
	}
	// Let the waits reach the server before the polls start.
	time.Sleep(3 * time.Second)
	pollCtx, pollCancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer pollCancel()
	var polls sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, a := range agents {
		polls.Add(1)
		go func() {
			defer polls.Done()
			etag := ""
			for range rounds {
				sem <- struct{}{}
				req, _ := http.NewRequestWithContext(pollCtx, http.MethodGet, "http://"+addr+"/index.json", nil)
				if etag != "" {
					req.Header.Set("If-None-Match", etag)
				}
				resp, err := a.poll.Do(req)
				<-sem
				if err != nil {
					run.failed.Add(1)
					run.firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					etag = resp.Header.Get("ETag")
					run.polls.Add(1)
				case http.StatusNotModified:
					run.polls.Add(1)
				default:
					run.failed.Add(1)
					run.firstErr.CompareAndSwap(nil, resp.Status)
				}
			}
		}()
	}
	polls.Wait()
	cancel()
	waits.Wait()
	run.held.Store(int64(n) - run.refused.Load())
	return run
}

// serveChild is TestMain's server for the fleet tests: a process of its
// own, as strata serve is, so that its descriptors and the 10,000
// agents' do not share one file limit. It serves the directory
// STRATA_TEST_SERVE within STRATA_TEST_SERVE_CONNS connections (0: the
// default), prints "ADDR CONNS WAITS" and serves until its stdin closes.
func serveChild(dir string) {
	conns, _ := strconv.Atoi(os.Getenv("STRATA_TEST_SERVE_CONNS"))
	s, err := serve.Listen("127.0.0.1:0", serve.Handler(dir, nil), serve.Limits{Conns: conns})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s %d %d\n", s.Addr, s.Limits.Conns, s.Limits.Waits)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	_ = s.Serve(ctx, time.Second)
	os.Exit(0)
}

// fleetServer serves a repository with a 16 KiB index from a server
// process (serveChild) within conns connections (0: the default); a
// scale test, skipped under -short.
func fleetServer(t *testing.T, conns int) (string, serve.Limits) {
	t.Helper()
	if testing.Short() {
		t.Skip("a scale test: make test runs it")
	}
	dir, _, place := fixture(t)
	if err := os.WriteFile(place("index.json"), make([]byte, 16<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	return childServer(t, dir, conns)
}

// childServer starts serveChild on dir; it ends with the test.
func childServer(t *testing.T, dir string, conns int) (addr string, limits serve.Limits) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STRATA_TEST_SERVE="+dir, "STRATA_TEST_SERVE_CONNS="+strconv.Itoa(conns))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the server process: %v", err)
	}
	if _, err := fmt.Sscanf(line, "%s %d %d", &addr, &limits.Conns, &limits.Waits); err != nil {
		t.Fatalf("the server process said %q: %v", line, err)
	}
	return addr, limits
}

// Issue 22: 10,000 agents, each with a nudge wait held open and index
// polls on a second connection, against one strata serve at its default
// limits (its file limit is this machine's 20,000: fewer connections
// than the agents would hold if their polls kept theirs open). Every poll
// is answered, and every wait is held: waits have a pool and a
// per-address share of their own, so they never use up the polls' share.
func TestFleet10000AgentsAtDefaults(t *testing.T) {
	const agents, rounds = 10000, 3
	addr, limits := fleetServer(t, 0)
	if limits.Waits < agents {
		t.Fatalf("the default wait pool (%d of %d connections) cannot hold the fleet's %d waits", limits.Waits, limits.Conns, agents)
	}
	r := runFleet(t, addr, agents, rounds, 512, 1)
	t.Logf("%d agents at the defaults (%d connections, %d waits): %d polls answered, %d failed; %d waits held, %d refused, %d yielded",
		agents, limits.Conns, limits.Waits, r.polls.Load(), r.failed.Load(), r.held.Load(), r.refused.Load(), r.yielded.Load())
	if r.failed.Load() > 0 || r.polls.Load() != agents*rounds {
		t.Errorf("%d of %d polls answered (first failure: %v)", r.polls.Load(), agents*rounds, r.firstErr.Load())
	}
	if r.refused.Load() > 0 || r.yielded.Load() > 0 {
		t.Errorf("%d waits refused, %d cut short: the defaults hold every agent's wait", r.refused.Load(), r.yielded.Load())
	}
}

// The same fleet, 100 agents behind each address (a NAT), against a
// server an operator limited to 4,096 connections, with 1,024 polls at
// once: every poll is still answered. Waits beyond their pool or their
// address's share are refused (the agent polls on its interval instead)
// without using up the address's share of polls. (Idle connections
// yield first; TestWaitsYieldToPolls shows a held wait giving its
// connection up when nothing is idle.)
func TestFleet10000AgentsOnFewConnections(t *testing.T) {
	const agents, rounds = 10000, 3
	addr, limits := fleetServer(t, 4096)
	r := runFleet(t, addr, agents, rounds, 1024, 100)
	t.Logf("%d agents, %d connections, %d waits: %d polls answered, %d failed; %d waits held, %d refused, %d yielded",
		agents, limits.Conns, limits.Waits, r.polls.Load(), r.failed.Load(), r.held.Load(), r.refused.Load(), r.yielded.Load())
	if r.failed.Load() > 0 || r.polls.Load() != agents*rounds {
		t.Errorf("%d of %d polls answered (first failure: %v)", r.polls.Load(), agents*rounds, r.firstErr.Load())
	}
	if r.held.Load() == 0 || r.refused.Load() == 0 {
		t.Errorf("%d waits held, %d refused: the test did not fill the wait pool", r.held.Load(), r.refused.Load())
	}
}
