package agent_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/testenv"
	"github.com/strata-dev/strata/tests/fixture"
)

// BenchmarkStatusOverAgents (make bench; issue 22): strata status
// --inventory's work, fleet.Status, against N real agents (default
// 1,000; STRATA_BENCH_AGENTS), each over a directory node of its own and
// answering on a listener of its own, side by side in one run with a
// plain parallel HTTP client fetching the same N health documents (as
// many at once, 64). Rounds alternate, and wait out the agents' health
// cache in between, so both sides pay for every agent's reading. It
// reports the medians of 5 rounds each, wall and CPU time (the
// process's: the agents' answers are in both sides), and their ratios
// (STRATA_BENCH_REPORT, when set, receives the line).
func BenchmarkStatusOverAgents(b *testing.B) {
	n := 1000
	if s := os.Getenv("STRATA_BENCH_AGENTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("STRATA_BENCH_AGENTS=%q", s)
		}
	}
	f := fixture.New(b)
	nodes := make([]fleet.Node, n)
	for i := range nodes {
		root := filepath.Join(b.TempDir(), "node")
		if err := os.Rename(f.Provision(), root); err != nil {
			b.Fatal(err)
		}
		a := agent.New(agent.Options{Root: root, ConfigPath: filepath.Join(root, "none.yaml")})
		srv := httptest.NewServer(a.Handler())
		b.Cleanup(srv.Close)
		nodes[i] = fleet.Node{Name: fmt.Sprintf("n%04d", i), Health: srv.URL + "/health"}
	}
	ctx := context.Background()
	const parallel = 64
	strata := func() time.Duration {
		start := time.Now()
		rep := fleet.Status(ctx, nodes, fleet.StatusOptions{Parallel: parallel, Timeout: time.Minute})
		if len(rep.Nodes) != n || rep.Counts[fleet.StateUnreachable] != 0 {
			b.Fatalf("status: %v", rep.Counts)
		}
		return time.Since(start)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxIdleConns: n}}
	plain := func() time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, parallel)
		for _, nd := range nodes {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				resp, err := client.Get(nd.Health)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	// CPU time per round, of the whole process: the agents answering
	// are in it too, and serve both sides alike.
	var ts, tp, cs, cp []time.Duration
	timed := func(f func() time.Duration, wall, cpu *[]time.Duration) {
		time.Sleep(agent.HealthCacheFor + 100*time.Millisecond)
		c0 := testenv.CPUTime()
		*wall = append(*wall, f())
		*cpu = append(*cpu, testenv.CPUTime()-c0)
	}
	b.ResetTimer()
	for range 5 {
		timed(strata, &ts, &cs)
		timed(plain, &tp, &cp)
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	ms, mp, mcs, mcp := median(ts), median(tp), median(cs), median(cp)
	b.ReportMetric(float64(ms.Milliseconds()), "ms/status")
	b.ReportMetric(float64(mp.Milliseconds()), "ms/plain")
	b.ReportMetric(float64(mcs.Milliseconds()), "cpu-ms/status")
	b.ReportMetric(float64(mcp.Milliseconds()), "cpu-ms/plain")
	b.ReportMetric(float64(ms)/float64(mp), "ratio")
	line := fmt.Sprintf("status --inventory over %d real agents: %s wall, %s CPU (medians of 5), a plain parallel HTTP client fetching their health: %s wall, %s CPU; ratio %.2fx wall, %.2fx CPU (aim: within 2x)",
		n, ms.Round(time.Millisecond), mcs.Round(time.Millisecond), mp.Round(time.Millisecond), mcp.Round(time.Millisecond),
		float64(ms)/float64(mp), float64(mcs)/float64(mcp))
	b.Log(line)
	if out := os.Getenv("STRATA_BENCH_REPORT"); out != "" {
		_ = os.WriteFile(filepath.Clean(out), []byte(line+"\n"), 0o644)
	}
}
