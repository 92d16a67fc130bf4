package agent

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nudge"
)

// The waits of listenNudges.
const (
	relayHold     = 55 * time.Second // how long a relay holds a request (strata serve)
	relayRetry    = 30 * time.Second // after an error
	relayAbsent   = 10 * time.Minute // after a server that relays nothing (404)
	relayFloor    = time.Second      // the least wait after any answer
	relayMaxReply = nudge.MaxSize
)

// relayWait is how long to wait after an answer that came elapsed after
// the request: at least what was left of the hold (a relay answering 204
// at once, by mistake or on purpose, is asked again no sooner than one
// that held the request), never under relayFloor, plus up to a tenth of
// that and a second of jitter so that a fleet's agents drift apart.
func relayWait(elapsed time.Duration) time.Duration {
	w := max(relayHold-elapsed, relayFloor)
	return w + time.Duration(rand.Int64N(int64(w/10+time.Second)))
}

// listenNudges waits on the repository's server for nudges (strata serve
// relays them: GET REPO/nudge) and takes each as if posted to the agent:
// verified with the node's keys. A server that does not relay (any other
// web server answers 404) is asked again only every 10 minutes.
func (a *Agent) listenNudges(ctx context.Context) {
	client := &http.Client{Timeout: relayHold + 30*time.Second}
	for {
		wait := a.listenOnce(ctx, client)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// listenOnce makes one request to the relay and returns how long to wait
// before the next.
func (a *Agent) listenOnce(ctx context.Context, client *http.Client) time.Duration {
	a.mu.Lock()
	base, after := a.state.Repo, a.nudged.Unix()
	a.mu.Unlock()
	if base == "" {
		return time.Second // not configured yet
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return relayRetry // a directory or a registry: nothing relays
	}
	l, err := nodestate.Node{Root: a.o.Root}.ReadLedger()
	if err != nil {
		return relayRetry
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	u := base + "nudge?line=" + url.QueryEscape(l.Entries[0].Line) + "&after=" + strconv.FormatInt(after, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return relayAbsent
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return relayRetry
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return relayWait(time.Since(start))
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusForbidden:
		return relayAbsent
	default:
		return relayRetry
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, relayMaxReply+1))
	if err != nil {
		return relayRetry
	}
	if err := a.takeNudge(body); err != nil {
		a.metrics.nudges.WithLabelValues("refused").Inc()
		a.logRefused(fmt.Errorf("relayed by %s: %w", base, err))
		return relayRetry
	}
	a.metrics.nudges.WithLabelValues("taken").Inc()
	a.o.Log("nudged by the repository's server: polling now")
	return relayWait(time.Since(start))
}
