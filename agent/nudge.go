package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/sign"
)

// Nudge asks the agents of a line to poll now (see package nudge).
type Nudge = nudge.Nudge

// SignNudge makes a nudge for the agents of line, signed with key.
func SignNudge(key *sign.Key, line string, t time.Time) (*Nudge, error) {
	return nudge.Sign(key, line, t)
}

// SendNudge posts n to the agent whose health and metrics are at base
// (http://HOST:PORT/).
func SendNudge(ctx context.Context, base string, n *Nudge) error {
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	u := base
	if len(u) == 0 || u[len(u)-1] != '/' {
		u += "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"nudge", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("nudging %s: %w", base, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := nudgeClient.Do(req)
	if err != nil {
		return fmt.Errorf("nudging %s: %w", base, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("nudging %s: %w: %s: %s", base, ErrNudgeRefused, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// ErrNudgeRefused reports an agent that answered a nudge with a refusal
// (a key its node does not trust, another line, a stale nudge).
var ErrNudgeRefused = errors.New("agent refused the nudge")

// nudgeClient bounds a nudge's round trip: an agent that does not answer
// must not hold the sender.
var nudgeClient = &http.Client{Timeout: 30 * time.Second}

// takeNudge checks a nudge's body and wakes the agent if it holds.
func (a *Agent) takeNudge(body []byte) error {
	n, err := nudge.Parse(body)
	if err != nil {
		return err
	}
	nd := node.Node{Root: a.o.Root}
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
