package fleet

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Outcomes of a node in a rollout or a cluster restart.
const (
	OutcomeUpdated     = "updated"     // rollout: now at the target
	OutcomeRestarted   = "restarted"   // restart: its units restarted, healthy
	OutcomeCurrent     = "current"     // rollout: already at the target, nothing done
	OutcomeFailed      = "failed"      // tried and failed, or not on the line
	OutcomeUnreachable = "unreachable" // could not be reached
	OutcomeSkipped     = "skipped"     // not tried: the operation halted first
)

// NodeResult is what a rollout or restart did to one node.
type NodeResult struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	// From and To are the node's head before and after (rollout).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Wave is the wave the node was in (1 is the first; 0: none).
	Wave int `json:"wave,omitempty"`
	// Units are the units restarted or reloaded on the node.
	Units []string `json:"units,omitempty"`
	// Repaired are the layers a restart --repair rebuilt on the node.
	Repaired []string `json:"repaired,omitempty"`
	// Error says why the node failed, could not be reached or was
	// skipped.
	Error string `json:"error,omitempty"`
	// timedOut marks a failure that was the node running out of time.
	timedOut bool
}

// healthTimedOut starts the error of a node whose health did not report
// the target within the health timeout.
const healthTimedOut = "not healthy within --health-timeout"

// WaveOptions shape the waves of a rollout or restart.
type WaveOptions struct {
	// Canary is the size of the first wave (0: no canary wave).
	Canary int
	// MaxUnavailable is how many nodes may be out of service at once:
	// the nodes of a wave plus those that are unreachable. At least 1.
	MaxUnavailable int
	// Parallel bounds the SSH sessions working at once within a wave
	// (default 16).
	Parallel int
	// NodeTimeout bounds the work on each node: its command and the
	// wait for its health (default 30 minutes). A node that overruns it
	// fails, and its session is closed.
	NodeTimeout time.Duration
	// HealthTimeout bounds the wait for a node's health after its
	// command (default 2 minutes).
	HealthTimeout time.Duration
	// HTTP are the settings of health requests to agents (Client,
	// Timeout), for nodes with a health URL.
	HTTP StatusOptions
	// Progress receives one line per step, if set.
	Progress func(string)
}

// setDefaults fills in the defaults and returns a progress callback that
// is never nil.
func (o *WaveOptions) setDefaults() func(string) {
	if o.HealthTimeout <= 0 {
		o.HealthTimeout = 2 * time.Minute
	}
	o.HTTP.setDefaults()
	if o.Progress == nil {
		return func(string) {}
	}
	return o.Progress
}

// ParseMaxUnavailable reads --max-unavailable: a count ("2") or a share of
// total ("25%", rounded down, at least 1).
func ParseMaxUnavailable(s string, total int) (int, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return 0, fmt.Errorf("max unavailable %q: want a count or a percentage from 1%% to 100%%", s)
		}
		return max(1, total*n/100), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("max unavailable %q: want a count of at least 1 or a percentage", s)
	}
	return n, nil
}

// runWaves runs step on the nodes at idx, wave by wave, at most parallel
// at a time. A wave holds MaxUnavailable nodes less those unreachable so
// far (the probe's, then those a wave could not reach: they are out of
// service too), the canary wave at most Canary; with no room left it
// stops. It stops after the first wave in which a node failed (step's
// outcome OutcomeFailed). The nodes it did not get to are marked skipped
// with the reason, which it returns ("" when it ran to the end).
func runWaves(ctx context.Context, results []NodeResult, idx []int, o WaveOptions, unreachable int, step func(ctx context.Context, i int), progress func(string)) string {
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = 30 * time.Minute
	}
	if progress == nil {
		progress = func(string) {}
	}
	skip := func(rest []int, why string) string {
		for _, i := range rest {
			results[i].Outcome, results[i].Error = OutcomeSkipped, why
		}
		return why
	}
	rest := idx
	for w := 1; len(rest) > 0; w++ {
		if err := ctx.Err(); err != nil {
			return skip(rest, fmt.Sprintf("interrupted before wave %d", w))
		}
		size := o.MaxUnavailable - unreachable
		if size < 1 {
			return skip(rest, fmt.Sprintf("%d nodes unreachable and --max-unavailable allows %d: taking no other node out of service (bring them back, or raise --max-unavailable)", unreachable, o.MaxUnavailable))
		}
		kind := "wave"
		if w == 1 && o.Canary > 0 {
			kind, size = "canary wave", min(o.Canary, size)
		}
		wave := rest[:min(size, len(rest))]
		rest = rest[len(wave):]
		progress(fmt.Sprintf("%s %d: %s (%d more after it)", kind, w, names(results, wave), len(rest)))
		for _, i := range wave {
			results[i].Wave = w
		}
		each(len(wave), o.Parallel, func(k int) {
			nctx, cancel := context.WithTimeout(ctx, o.NodeTimeout)
			defer cancel()
			step(nctx, wave[k])
			r := &results[wave[k]]
			switch {
			case r.Outcome != OutcomeFailed || ctx.Err() != nil:
			case nctx.Err() == context.DeadlineExceeded:
				r.Error += fmt.Sprintf(" (--node-timeout %s ran out)", o.NodeTimeout)
				r.timedOut = true
			case strings.HasPrefix(r.Error, healthTimedOut):
				r.timedOut = true
			}
		})
		if ctx.Err() != nil {
			return skip(rest, fmt.Sprintf("interrupted during %s %d", kind, w))
		}
		var failed []string
		timedOut := 0
		for _, i := range wave {
			switch results[i].Outcome {
			case OutcomeFailed:
				failed = append(failed, results[i].Name)
				if results[i].timedOut {
					timedOut++
				}
			case OutcomeUnreachable:
				unreachable++
			}
		}
		if len(failed) > 0 {
			why := fmt.Sprintf("halted after %s %d: %s failed", kind, w, strings.Join(failed, ", "))
			if timedOut == len(failed) {
				why += fmt.Sprintf(" (every one ran out of time: --health-timeout %s, --node-timeout %s; raise them if the nodes are slow, not broken)", o.HealthTimeout, o.NodeTimeout)
			}
			return skip(rest, why)
		}
	}
	return ""
}

// each runs fn(0) to fn(n-1), at most limit at once, and waits for them.
func each(n, limit int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(limit)
	for i := range n {
		g.Go(func() error { fn(i); return nil })
	}
	_ = g.Wait()
}

func names(results []NodeResult, idx []int) string {
	var out []string
	for _, i := range idx {
		out = append(out, results[i].Name)
	}
	return strings.Join(out, " ")
}

// countOutcomes counts results by outcome.
func countOutcomes(results []NodeResult) map[string]int {
	c := map[string]int{}
	for _, r := range results {
		c[r.Outcome]++
	}
	return c
}

// SortResults returns results worst first (failed, unreachable, skipped,
// then the nodes that are done), then by name.
func SortResults(results []NodeResult) []NodeResult {
	rank := map[string]int{OutcomeFailed: 0, OutcomeUnreachable: 1, OutcomeSkipped: 2, OutcomeUpdated: 3, OutcomeRestarted: 3, OutcomeCurrent: 4}
	out := append([]NodeResult(nil), results...)
	sort.SliceStable(out, func(i, j int) bool {
		if rank[out[i].Outcome] != rank[out[j].Outcome] {
			return rank[out[i].Outcome] < rank[out[j].Outcome]
		}
		return out[i].Name < out[j].Name
	})
	return out
}
