package reaper

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Kinds of what the reaper deletes, as the metric's and the status's label.
const (
	KindNodes     = "nodes"     // a departed node's keys (counted once per node reaped)
	KindIntents   = "intents"   // intents marked for deletion
	KindRevisions = "revisions" // old unreferenced revisions
)

// Metrics are the reaper's Prometheus metrics. A nil *Metrics records
// nothing (tests, sluice dev).
type Metrics struct {
	deletions *prometheus.CounterVec // kind
	lastPass  prometheus.Gauge
	held      prometheus.Gauge
}

// NewMetrics registers the reaper's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deletions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reaper_deletions_total",
			Help: "What this reaper deleted, by kind: nodes (a departed node's keys), intents (marked for deletion), revisions (old, unreferenced).",
		}, []string{"kind"}),
		lastPass: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_reaper_last_pass_timestamp_seconds",
			Help: "When the last pass ended (unix seconds).",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_reaper_held_nodes",
			Help: "Departed nodes whose keys the mass-deletion guard holds until they come back or an operator runs sluice reaper confirm; 0 when it holds none.",
		}),
	}
	for _, k := range []string{KindNodes, KindIntents, KindRevisions} {
		m.deletions.WithLabelValues(k) // listed at 0 before the first deletion
	}
	reg.MustRegister(m.deletions, m.lastPass, m.held)
	return m
}

// heldNodes records how many departed nodes the guard holds.
func (m *Metrics) heldNodes(n int) {
	if m != nil {
		m.held.Set(float64(n))
	}
}
