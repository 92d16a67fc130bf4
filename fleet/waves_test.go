package fleet

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseMaxUnavailable(t *testing.T) {
	for _, c := range []struct {
		in    string
		total int
		want  int
	}{{"2", 10, 2}, {"25%", 10, 2}, {"25%", 3, 1}, {"100%", 7, 7}, {"1", 1, 1}} {
		got, err := ParseMaxUnavailable(c.in, c.total)
		if err != nil || got != c.want {
			t.Errorf("ParseMaxUnavailable(%q, %d) = %d, %v; want %d", c.in, c.total, got, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-1", "0%", "101%", "x", "", "2.5", "%"} {
		if _, err := ParseMaxUnavailable(bad, 10); err == nil {
			t.Errorf("ParseMaxUnavailable(%q) accepted", bad)
		}
	}
}

func results(n int) ([]NodeResult, []int) {
	var rs []NodeResult
	var idx []int
	for i := range n {
		rs = append(rs, NodeResult{Name: fmt.Sprintf("n%d", i)})
		idx = append(idx, i)
	}
	return rs, idx
}

// A failure in a wave makes it the last: later nodes are skipped, never
// touched.
func TestRunWavesHaltsAfterFailedWave(t *testing.T) {
	rs, idx := results(6)
	var touched atomic.Int32
	halted := runWaves(context.Background(), rs, idx, WaveOptions{Canary: 1, MaxUnavailable: 2}, 0, func(_ context.Context, i int) {
		touched.Add(1)
		rs[i].Outcome = OutcomeUpdated
		if i == 2 {
			rs[i].Outcome = OutcomeFailed
		}
	}, nil)
	if touched.Load() != 3 {
		t.Errorf("%d nodes touched, want 3 (canary, then the wave with the failure)", touched.Load())
	}
	if !strings.Contains(halted, "wave 2") || !strings.Contains(halted, "n2") {
		t.Errorf("halted %q", halted)
	}
	for _, r := range rs[3:] {
		if r.Outcome != OutcomeSkipped || r.Wave != 0 {
			t.Errorf("%s: %s in wave %d, want skipped", r.Name, r.Outcome, r.Wave)
		}
	}
}

// A wave whose every failure was a node running out of time names the
// timeouts: the node's own (its step ran past --node-timeout) and the
// health wait's.
func TestRunWavesNamesTimeouts(t *testing.T) {
	rs, idx := results(4)
	o := WaveOptions{MaxUnavailable: 2, NodeTimeout: 50 * time.Millisecond, HealthTimeout: time.Minute}
	halted := runWaves(context.Background(), rs, idx, o, 0, func(ctx context.Context, i int) {
		rs[i].Outcome = OutcomeFailed
		if i == 0 {
			<-ctx.Done()
			rs[i].Error = "apply-overlay: killed"
			return
		}
		rs[i].Error = healthTimedOut + " 1m0s (or --node-timeout ran out): health reports head 1.0.1"
	}, nil)
	if !strings.Contains(rs[0].Error, "--node-timeout 50ms ran out") {
		t.Errorf("n0: %q, want it to name --node-timeout", rs[0].Error)
	}
	if !strings.Contains(halted, "every one ran out of time: --health-timeout 1m0s, --node-timeout 50ms") {
		t.Errorf("halted %q, want it to name both timeouts", halted)
	}
	// One plain failure among them: the halt names no timeout.
	rs, idx = results(2)
	halted = runWaves(context.Background(), rs, idx, o, 0, func(_ context.Context, i int) {
		rs[i].Outcome, rs[i].Error = OutcomeFailed, healthTimedOut+" 1m0s"
		if i == 1 {
			rs[i].Error = "apply-overlay: refused by validation"
		}
	}, nil)
	if strings.Contains(halted, "ran out of time") {
		t.Errorf("halted %q: not every failure was a timeout", halted)
	}
}

// Unreachable nodes use up the unavailability budget.
func TestRunWavesCountsUnreachable(t *testing.T) {
	rs, idx := results(3)
	halted := runWaves(context.Background(), rs, idx, WaveOptions{MaxUnavailable: 2}, 2, func(context.Context, int) {
		t.Error("a node was touched with no room left")
	}, nil)
	if !strings.Contains(halted, "2 nodes unreachable") || !strings.Contains(halted, "--max-unavailable allows 2") {
		t.Errorf("halted %q, want it to name --max-unavailable", halted)
	}
	for _, r := range rs {
		if r.Outcome != OutcomeSkipped {
			t.Errorf("%s: %s, want skipped", r.Name, r.Outcome)
		}
	}
	rs, idx = results(4)
	waves := map[int]int{}
	runWaves(context.Background(), rs, idx, WaveOptions{MaxUnavailable: 3}, 1, func(_ context.Context, i int) {
		rs[i].Outcome = OutcomeUpdated
	}, nil)
	for _, r := range rs {
		waves[r.Wave]++
	}
	if waves[1] != 2 || waves[2] != 2 {
		t.Errorf("waves %v, want two waves of two (3 unavailable at most, 1 already)", waves)
	}
	// Nodes a wave cannot reach are out of service too: later waves
	// shrink, and with no room left the rest is skipped.
	rs, idx = results(6)
	halted = runWaves(context.Background(), rs, idx, WaveOptions{MaxUnavailable: 3}, 0, func(_ context.Context, i int) {
		rs[i].Outcome = OutcomeUpdated
		if i == 0 || i == 3 || i == 4 {
			rs[i].Outcome = OutcomeUnreachable
		}
	}, nil)
	got := fmt.Sprint(rs[0].Wave, rs[1].Wave, rs[2].Wave, rs[3].Wave, rs[4].Wave, rs[5].Wave)
	if got != "1 1 1 2 2 0" || rs[5].Outcome != OutcomeSkipped || !strings.Contains(halted, "3 nodes unreachable") {
		t.Errorf("waves %s, n5 %s, halted %q; want 3, then 2 (one went unreachable), then none (three)", got, rs[5].Outcome, halted)
	}
}

// Every argument reaches the remote program as given, whatever it holds.
func TestShellQuote(t *testing.T) {
	argv := []string{"printf", "%s\\n", "plain", "it's", "$(touch /tmp/strata-quote-pwned)", "a b\nc", "`id`", "'", "", "--x=;|&><*?"}
	out, err := exec.Command("/bin/sh", "-c", ShellQuote(argv)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(argv[2:], "\n") + "\n"; string(out) != want {
		t.Errorf("sh ran %q, got %q want %q", ShellQuote(argv), out, want)
	}
}

func TestExitErrorMessage(t *testing.T) {
	e := &ExitError{Code: 5, Stderr: "strata: progress\n{\"error\":\"overlay 1.0.1 taken back\",\"exit_code\":5}\n"}
	if e.Error() != "exit status 5: overlay 1.0.1 taken back" {
		t.Errorf("%q", e.Error())
	}
	e = &ExitError{Code: 3, Stderr: "line one\nstrata: refused\n"}
	if e.Error() != "exit status 3: strata: refused" {
		t.Errorf("%q", e.Error())
	}
}
