package nudge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ReadBody reads a nudge POSTed to a server (strata serve's relay, an
// agent): at most MaxSize bytes, within 10 seconds (a nudge is small; one
// that trickles in is dropped). On error it returns the status to answer:
// 413 for a body over MaxSize (said before reading when its length is
// declared), 400 for one that could not be read.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(10 * time.Second))
	tooLarge := fmt.Errorf("%w: a nudge is at most %d bytes", ErrRefused, MaxSize)
	if r.ContentLength > MaxSize {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxSize))
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: reading the nudge: %v", ErrRefused, err)
	}
	return body, 0, nil
}

// client bounds a nudge's round trip: an agent that does not answer must
// not hold the sender.
var client = &http.Client{Timeout: 30 * time.Second}

// Send posts n to the agent whose health and metrics are at base
// (http://HOST:PORT/). An agent that answers with anything but 202 (a key
// its node does not trust, another line, a stale nudge) is ErrRefused,
// with its answer.
func Send(ctx context.Context, base string, n *Nudge) error {
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
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("nudging %s: %w", base, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("nudging %s: the agent refused it: %w: %s: %s", base, ErrRefused, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
