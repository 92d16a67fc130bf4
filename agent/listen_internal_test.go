package agent

import (
	"testing"
	"time"
)

// After a relay's answer the agent waits at least what was left of the
// hold, never less than the floor, with bounded jitter: a relay that
// answers 204 at once cannot make it loop (issue 25: 15,869 requests in
// 12 s).
func TestRelayWait(t *testing.T) {
	for _, elapsed := range []time.Duration{0, time.Millisecond, 30 * time.Second, relayHold, 2 * relayHold} {
		least := max(relayHold-elapsed, relayFloor)
		for range 100 {
			w := relayWait(elapsed)
			if w < least || w >= least+least/10+time.Second {
				t.Fatalf("relayWait(%s) = %s, want in [%s, %s)", elapsed, w, least, least+least/10+time.Second)
			}
		}
	}
}
