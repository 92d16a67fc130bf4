package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
)

// Nudge asks an agent to poll now instead of at its next poll. It is
// signed by a key the node trusts, names the node's line, and is fresh
// (within NudgeWindow of the agent's clock, newer than the last nudge the
// agent took); any other nudge is refused and changes nothing.
type Nudge struct {
	Line string `json:"line"`
	// Time is when it was made (Unix seconds).
	Time int64 `json:"time"`
	// Signature is a minisign signature of Message(), trusted comment
	// "strata nudge".
	Signature string `json:"signature"`
}

// NudgeWindow is how far a nudge's time may be from the agent's clock.
const NudgeWindow = 5 * time.Minute

// nudgeComment is the trusted comment of a nudge's signature.
const nudgeComment = "strata nudge"

// maxNudgeSize bounds a nudge request's body.
const maxNudgeSize = 16 << 10

// message is what a nudge's signature covers.
func (n *Nudge) message() []byte {
	return []byte("strata nudge line=" + n.Line + " time=" + strconv.FormatInt(n.Time, 10) + "\n")
}

// SignNudge makes a nudge for the agents of line, signed with key.
func SignNudge(key *sign.Key, line string, t time.Time) (*Nudge, error) {
	if err := manifests.ValidLine(line); err != nil {
		return nil, err
	}
	n := &Nudge{Line: line, Time: t.Unix()}
	n.Signature = string(key.Sign(n.message(), nudgeComment))
	return n, nil
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
		return fmt.Errorf("nudging %s: %s: %s", base, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// nudgeClient bounds a nudge's round trip: an agent that does not answer
// must not hold the sender.
var nudgeClient = &http.Client{Timeout: 30 * time.Second}

// errNudge reports a refused nudge.
var errNudge = errors.New("nudge refused")

// takeNudge checks a nudge's body and wakes the agent if it holds.
func (a *Agent) takeNudge(body []byte) error {
	var n Nudge
	if err := json.Unmarshal(body, &n); err != nil {
		return fmt.Errorf("%w: not a nudge: %v", errNudge, err)
	}
	nd := node.Node{Root: a.o.Root}
	l, err := nd.ReadLedger()
	if err != nil {
		return err
	}
	if n.Line != l.Entries[0].Line {
		return fmt.Errorf("%w: for line %q, the node is on %q", errNudge, n.Line, l.Entries[0].Line)
	}
	keys, err := nd.TrustedKeys()
	if err != nil {
		return err
	}
	if _, err := keys.VerifyFor(n.message(), []byte(n.Signature), nudgeComment); err != nil {
		return fmt.Errorf("%w: %v", errNudge, err)
	}
	t := time.Unix(n.Time, 0)
	if d := time.Since(t); d > NudgeWindow || d < -NudgeWindow {
		return fmt.Errorf("%w: made at %s, more than %s from this node's clock", errNudge, t.UTC().Format(time.RFC3339), NudgeWindow)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !t.After(a.nudged) {
		return fmt.Errorf("%w: not newer than the last nudge taken (%s)", errNudge, a.nudged.UTC().Format(time.RFC3339))
	}
	a.nudged = t
	a.Wake()
	return nil
}
