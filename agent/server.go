package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/schema"
)

// Handler serves the agent's endpoints: GET /health (JSON, 503 while the
// configuration is invalid or the last apply failed), GET /metrics
// (Prometheus) and POST /nudge (a signed Nudge: 202 taken, 403 refused).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", a.serveHealth)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /nudge", func(w http.ResponseWriter, r *http.Request) {
		body, code, err := nudge.ReadBody(w, r)
		if err == nil {
			code, err = http.StatusForbidden, a.takeNudge(body)
		}
		if err != nil {
			a.metrics.nudges.WithLabelValues("refused").Inc()
			a.logRefused(err)
			if !errors.Is(err, nudge.ErrRefused) {
				code = http.StatusInternalServerError
			}
			http.Error(w, err.Error(), code)
			return
		}
		a.metrics.nudges.WithLabelValues("taken").Inc()
		a.o.Log("nudged: polling now")
		w.WriteHeader(http.StatusAccepted)
	})
	return mux
}

// serveHealth answers GET /health: the node's health as JSON (503 while
// the configuration is invalid or the last apply failed; with an error
// and the agent's state where the node cannot be read), naming the
// node's identity key, with the caller's nonce (?nonce=, up to 64
// letters and digits) in the body and the body signed by that key: a
// client that knows the key, and sent a fresh nonce, knows the answer is
// the node's and is not a replay.
func (a *Agent) serveHealth(w http.ResponseWriter, r *http.Request) {
	nonce := r.URL.Query().Get("nonce")
	if !validNonce(nonce) {
		http.Error(w, "nonce: up to 64 letters and digits", http.StatusBadRequest)
		return
	}
	key := a.identity()
	var doc any
	code := http.StatusOK
	h, err := a.Health(r.Context())
	if err != nil {
		code = http.StatusServiceUnavailable
		e := map[string]any{"error": err.Error(), "agent": a.State(), "nonce": nonce}
		if key != nil {
			e["identity"] = key.PublicString()
		}
		doc = e
	} else {
		if !h.Agent.ConfigValid || h.Agent.LastApply != nil && h.Agent.LastApply.Result != "ok" && h.Agent.LastApply.Result != "held" {
			code = http.StatusServiceUnavailable
		}
		h.Nonce = nonce
		if key != nil {
			h.Identity = key.PublicString()
		}
		doc = h
	}
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	body = append(body, '\n')
	if key != nil {
		w.Header().Set(schema.HealthSignatureHeader, schema.SignHealth(key, body))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// validNonce reports whether s is a nonce a health request may carry.
func validNonce(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// identity returns the node's identity key, made on first use (see
// nodestate.Node.Identity); nil, and logged, where it cannot be read or made:
// the health then goes unsigned, and a client that pins the key refuses
// it.
func (a *Agent) identity() *sign.Key {
	a.idMu.Lock()
	defer a.idMu.Unlock()
	if a.id != nil {
		return a.id
	}
	k, err := nodestate.Node{Root: a.o.Root}.Identity(true)
	if err != nil {
		a.o.Log("health unsigned: " + err.Error())
		return nil
	}
	a.id = k
	return k
}

// logRefused logs a refused nudge, at most one line every 10 seconds (a
// flood of bad nudges must not flood the journal; the metric counts all).
func (a *Agent) logRefused(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.refusedLogged) < 10*time.Second {
		a.refusedQuiet++
		return
	}
	msg := "nudge refused: " + err.Error()
	if a.refusedQuiet > 0 {
		msg += fmt.Sprintf(" (and %d more refused since the last report)", a.refusedQuiet)
	}
	a.refusedLogged, a.refusedQuiet = time.Now(), 0
	a.o.Log(msg)
}
