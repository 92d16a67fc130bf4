package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/strata-dev/strata/internal/nudge"
)

// Handler serves the agent's endpoints: GET /health (JSON, 503 while the
// configuration is invalid or the last apply failed), GET /metrics
// (Prometheus) and POST /nudge (a signed Nudge: 202 taken, 403 refused).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		h, err := a.Health(r.Context())
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": err.Error(), "agent": a.State()})
			return
		}
		code := http.StatusOK
		if !h.Agent.ConfigValid || h.Agent.LastApply != nil && h.Agent.LastApply.Result != "ok" {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h)
	})
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
