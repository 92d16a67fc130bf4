package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/strata-dev/strata/schema"
)

// health runs strata health on the node of se and returns its health
// and the node's clock minus this host's (zero when the node sends no
// clock).
func (se *session) health(ctx context.Context) (*schema.Health, time.Duration, error) {
	before := time.Now()
	out, err := se.runLimit(ctx, nil, maxHealth, se.s.Strata, "health", "--root", "/")
	after := time.Now()
	where := fmt.Sprintf("ssh %s: strata health", se.node)
	if err != nil {
		if ee, ok := err.(*ExitError); ok {
			return nil, 0, fmt.Errorf("%s: %w", where, ee)
		}
		return nil, 0, err
	}
	h, err := decodeHealth(out, where, "exit status 0")
	if err != nil {
		return nil, 0, err
	}
	var skew time.Duration
	if !h.Now.IsZero() {
		mid := before.Add(after.Sub(before) / 2)
		skew = h.Now.Sub(mid).Truncate(time.Second)
	}
	return h, skew, nil
}

// sshHealth connects to n and reads its health, within timeout after
// the connection is made.
func sshHealth(ctx context.Context, s *SSH, n Node, timeout time.Duration) (*schema.Health, time.Duration, error) {
	se, err := s.dial(ctx, n)
	if err != nil {
		return nil, 0, err
	}
	defer se.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return se.health(ctx)
}
