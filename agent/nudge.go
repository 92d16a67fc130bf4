package agent

import (
	"fmt"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nudge"
)

// takeNudge checks a nudge's body and wakes the agent if it holds.
func (a *Agent) takeNudge(body []byte) error {
	n, err := nudge.Parse(body)
	if err != nil {
		return err
	}
	nd := nodestate.Node{Root: a.o.Root}
	l, err := nd.ReadLedger()
	if err != nil {
		return err
	}
	keys, err := nd.TrustedKeys()
	if err != nil {
		return err
	}
	if err := n.Verify(keys, l.Entries[0].Line, time.Now()); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !n.At().After(a.nudged) {
		return fmt.Errorf("%w: not newer than the last nudge taken (%s)", nudge.ErrRefused, a.nudged.UTC().Format(time.RFC3339))
	}
	a.nudged = n.At()
	a.Wake()
	return nil
}
