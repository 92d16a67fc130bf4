package ctxiotest

import (
	"context"
	"fmt"
	"testing"
)

// An op that honours its context at every step stops at each but the
// last; check sees them all in order.
func TestEveryStep(t *testing.T) {
	var seen []string
	op := func(ctx context.Context, progress func(string)) error {
		for i := range 3 {
			progress(fmt.Sprint("step ", i))
			if i < 2 && ctx.Err() != nil {
				return fmt.Errorf("step %d: %w", i, ctx.Err())
			}
		}
		return nil
	}
	n := EveryStep(t, op, func(step string, stopped bool) { seen = append(seen, fmt.Sprint(step, " ", stopped)) })
	if n != 2 || fmt.Sprint(seen) != "[step 0 true step 1 true step 2 false]" {
		t.Errorf("%d stopped, seen %v", n, seen)
	}
}
