package ctxiotest

import (
	"context"
	"errors"
	"testing"
)

// EveryStep runs op once per progress step: run k gets a context that is
// cancelled as op reports its k-th step (progress is op's progress
// callback), so that op meets the cancellation at every step in turn.
// It stops after the run that reports fewer than k steps, which must
// succeed. After each interrupted run, check gets the step cancelled at
// and whether op stopped (it returned the context's error; false: it had
// finished and returned nil, which only a run cancelled at its last step
// may). Any other error fails the test, as does an op that never stops.
// EveryStep returns how many runs stopped.
func EveryStep(t *testing.T, op func(ctx context.Context, progress func(string)) error, check func(step string, stopped bool)) int {
	t.Helper()
	stopped := 0
	for k := 0; ; k++ {
		ctx, cancel := context.WithCancel(context.Background())
		var steps []string
		err := op(ctx, func(s string) {
			if len(steps) == k {
				cancel()
			}
			steps = append(steps, s)
		})
		cancel()
		if k >= len(steps) {
			if err != nil {
				t.Fatalf("uninterrupted: %v", err)
			}
			break
		}
		switch {
		case errors.Is(err, context.Canceled):
			stopped++
		case err != nil:
			t.Fatalf("cancelled at %q: %v, want context.Canceled", steps[k], err)
		case k < len(steps)-1:
			t.Errorf("cancelled at %q: went on to finish (%q)", steps[k], steps[len(steps)-1])
		}
		check(steps[k], err != nil)
	}
	if stopped == 0 {
		t.Error("no step stopped when cancelled")
	}
	return stopped
}
