package agent

import (
	"context"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-dev/strata/schema"
)

// metrics are the agent's Prometheus metrics, in a registry of their own.
type metrics struct {
	reg         *prometheus.Registry
	applied     prometheus.Counter
	failures    *prometheus.CounterVec
	polls       *prometheus.CounterVec
	nudges      *prometheus.CounterVec
	configValid prometheus.Gauge
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "strata_overlays_applied_total", Help: "Overlays this agent applied.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_apply_failures_total", Help: "Failed apply attempts, by reason (index_rollback, index_expired, signature, sequence, restart, validation, locked, tampered, local_edit, layer_refused, ...).",
		}, []string{"reason"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_polls_total", Help: "Polls of the repository's index, by result (changed, unchanged, error).",
		}, []string{"result"}),
		nudges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_nudges_total", Help: "Nudges received, by result (taken, refused).",
		}, []string{"result"}),
		configValid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "strata_agent_config_valid", Help: "1 when the agent's configuration is valid, 0 when it is missing or invalid.",
		}),
	}
	for _, r := range []string{"index_rollback", "index_expired", "signature", "sequence", "restart"} {
		m.failures.WithLabelValues(r)
	}
	for _, r := range []string{"changed", "unchanged", "error"} {
		m.polls.WithLabelValues(r)
	}
	for _, r := range []string{"taken", "refused"} {
		m.nudges.WithLabelValues(r)
	}
	version, goVersion := "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "strata_build_info", Help: "The strata build the agent runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": goVersion},
	})
	build.Set(1)
	m.reg.MustRegister(m.applied, m.failures, m.polls, m.nudges, m.configValid, build, &nodeCollector{a: a})
	return m
}

// nodeCollector reads the node's state at each scrape.
type nodeCollector struct{ a *Agent }

var (
	descHead = prometheus.NewDesc("strata_head_info", "The node's head: line, version, digest, and the image it was provisioned from.",
		[]string{"line", "version", "digest", "image"}, nil)
	descPending = prometheus.NewDesc("strata_pending_restarts", "Restarts and reloads the node owes (restart debt).", nil, nil)
	descSerial  = prometheus.NewDesc("strata_index_serial", "The highest index serial the node accepted.", nil, nil)
	descSince   = prometheus.NewDesc("strata_seconds_since_last_poll", "Seconds since the last successful poll (absent before the first).", nil, nil)
	descService = prometheus.NewDesc("strata_service_config_current", "1 when the service loaded the configuration on disk and that is the head's, with no restart or reload owed; 0 when its config changed on disk since it loaded it (a local edit included), differs from the head's, could not be read, or a restart or reload is owed, deferred to a reboot, or failed. Read again at each scrape.",
		[]string{"unit"}, nil)
	descServiceState = prometheus.NewDesc("strata_service_config_state", "1 for the state of the service's config: current, changed (on disk since it loaded it), bad (changed and refused by its validation), local-edit, owed, failed or error.",
		[]string{"unit", "state"}, nil)
	descLoaded = prometheus.NewDesc("strata_service_config_loaded_timestamp_seconds", "When the service last started or reloaded (Unix time), where known.",
		[]string{"unit"}, nil)
	descUnreachable  = prometheus.NewDesc("strata_repo_unreachable_seconds", "Seconds since the first of the polls that have failed since the last successful one; 0 while polls succeed.", nil, nil)
	descTree         = prometheus.NewDesc("strata_tree_matches_head", "1 when the node's files matched its head at the last check, 0 when they did not.", nil, nil)
	descNode         = prometheus.NewDesc("strata_node_readable", "1 when the agent could read the node's state at this scrape.", nil, nil)
	descLayerRefused = prometheus.NewDesc("strata_layer_refused", "1 for the layer the node's activation refused (its image does not match the record of its apply, which strata restart --repair rewrites, or the record does not match the overlay's signed manifest; the stacks hold only the layers below it); absent when every layer is stacked.",
		[]string{"version"}, nil)
)

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHead, descPending, descSerial, descSince, descUnreachable, descService, descServiceState, descLoaded, descTree, descNode, descLayerRefused} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.State()
	if !st.LastPoll.IsZero() {
		ch <- prometheus.MustNewConstMetric(descSince, prometheus.GaugeValue, time.Since(st.LastPoll).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descUnreachable, prometheus.GaugeValue, st.UnreachableSeconds)
	if st.TreeMatches != nil {
		ch <- prometheus.MustNewConstMetric(descTree, prometheus.GaugeValue, b2f(*st.TreeMatches))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := c.a.nodeHealth(ctx, false)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descNode, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descNode, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(descHead, prometheus.GaugeValue, 1, h.Line, h.Head.Version, h.Head.Digest, h.Image.Version)
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(len(h.Pending)))
	ch <- prometheus.MustNewConstMetric(descSerial, prometheus.GaugeValue, float64(h.IndexSerial))
	if li := h.LayerIntegrity; li != nil && li.Refused != nil {
		ch <- prometheus.MustNewConstMetric(descLayerRefused, prometheus.GaugeValue, 1, li.Refused.Version)
	}
	if h.UnitsError != "" {
		// Nothing is proven: every service says so.
		for _, unit := range h.Services {
			ch <- prometheus.MustNewConstMetric(descService, prometheus.GaugeValue, 0, unit)
			ch <- prometheus.MustNewConstMetric(descServiceState, prometheus.GaugeValue, 1, unit, schema.UnitError)
		}
		return
	}
	for _, u := range h.Units {
		ch <- prometheus.MustNewConstMetric(descService, prometheus.GaugeValue, b2f(u.Current()), u.Unit)
		ch <- prometheus.MustNewConstMetric(descServiceState, prometheus.GaugeValue, 1, u.Unit, u.State)
		if !u.LoadedAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(descLoaded, prometheus.GaugeValue, float64(u.LoadedAt.UnixNano())/1e9, u.Unit)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
