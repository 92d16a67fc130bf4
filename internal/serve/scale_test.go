package serve_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/serve"
)

// counting wraps a handler and counts responses by status and the body
// bytes written.
type counting struct {
	h           http.Handler
	ok, notMod  atomic.Int64
	other       atomic.Int64
	bodyBytes   atomic.Int64
	headerBytes atomic.Int64
}

type countingWriter struct {
	http.ResponseWriter
	c    *counting
	code int
}

func (w *countingWriter) WriteHeader(code int) {
	w.code = code
	for k, vs := range w.Header() {
		for _, v := range vs {
			w.c.headerBytes.Add(int64(len(k) + len(v) + 4))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.c.bodyBytes.Add(int64(len(p)))
	return w.ResponseWriter.Write(p)
}

func (c *counting) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &countingWriter{ResponseWriter: rw, c: c}
	c.h.ServeHTTP(w, r)
	switch w.code {
	case http.StatusOK:
		c.ok.Add(1)
	case http.StatusNotModified:
		c.notMod.Add(1)
	default:
		c.other.Add(1)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Issue 8, test 8: 2,000 simulated agents poll one strata serve over
// loopback TCP (each its own HTTPStore, sharing a bounded pool of
// connections as a fleet behind one NAT would not, but as one test
// process must). Every unchanged poll must be one 304 with no body; the
// bytes, CPU (server and clients, one process) and latency per poll are
// reported, not asserted (these machines are shared).
func TestScale2000Agents(t *testing.T) {
	const agents, rounds = 2000, 5
	dir, _, place := fixture(t)
	index := make([]byte, 64<<10) // an index of a long line: 64 KiB
	for i := range index {
		index[i] = 'a' + byte(i%26)
	}
	if err := os.WriteFile(place("index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &counting{h: serve.Handler(dir, nil)}
	srv := httptest.NewServer(c)
	defer srv.Close()
	tr := repo.NewHTTPClient()
	tr.Transport.(*http.Transport).MaxConnsPerHost = 256
	tr.Transport.(*http.Transport).MaxIdleConnsPerHost = 256
	tr.Transport.(*http.Transport).MaxIdleConns = 256
	stores := make([]*repo.HTTPStore, agents)
	for i := range stores {
		st, err := repo.HTTP(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		st.Client = tr
		stores[i] = st
	}
	ctx := context.Background()
	poll := func(record []time.Duration) (changed int64) {
		var wg sync.WaitGroup
		var n atomic.Int64
		sem := make(chan struct{}, 256)
		for i, st := range stores {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				start := time.Now()
				ch, err := st.Poll(ctx)
				if record != nil {
					record[i] = time.Since(start)
				}
				if err != nil {
					t.Errorf("poll: %v", err)
				}
				if ch {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return n.Load()
	}
	if n := poll(nil); n != agents {
		t.Fatalf("first round: %d agents saw a change, want %d", n, agents)
	}
	firstBody := c.bodyBytes.Load()
	c.bodyBytes.Store(0)
	c.headerBytes.Store(0)
	c.ok.Store(0)
	cpu0, wall0 := cpuTime(), time.Now()
	var lat []time.Duration
	for r := 0; r < rounds; r++ {
		rec := make([]time.Duration, agents)
		if n := poll(rec); n != 0 {
			t.Errorf("round %d: %d agents saw a change in an unchanged index", r, n)
		}
		lat = append(lat, rec...)
	}
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	polls := int64(agents * rounds)
	if c.notMod.Load() != polls || c.ok.Load() != 0 || c.other.Load() != 0 || c.bodyBytes.Load() != 0 {
		t.Fatalf("unchanged polls: %d answered 304, %d answered 200, %d otherwise, %d body bytes; want %d 304s and no body",
			c.notMod.Load(), c.ok.Load(), c.other.Load(), c.bodyBytes.Load(), polls)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	report := fmt.Sprintf("%d agents x %d unchanged polls of a %d-byte index: every one a 304, 0 body bytes, %d header bytes per poll; first (changed) round %d body bytes per agent; CPU %.1f µs per poll (server and clients in one process); %.0f polls/s; latency p50 %s p99 %s max %s",
		agents, rounds, len(index), c.headerBytes.Load()/polls, firstBody/agents,
		float64(cpu.Microseconds())/float64(polls), float64(polls)/wall.Seconds(),
		p(0.50).Round(time.Microsecond), p(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	t.Log(report)
	if out := os.Getenv("STRATA_SCALE_REPORT"); out != "" {
		_ = os.WriteFile(filepath.Clean(out), []byte(report+"\n"), 0o644)
	}
}
