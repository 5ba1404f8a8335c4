package agent

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's Prometheus metrics: how long applies and health
// checks take. A nil *Metrics records nothing (tests, benchmarks, sluice dev).
type Metrics struct {
	apply *prometheus.HistogramVec // result
	check *prometheus.HistogramVec // check, result
}

// NewMetrics registers the agent's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	// From 10ms to about 5 minutes: an apply or check that takes longer
	// than its deadline is cut short anyway.
	buckets := prometheus.ExponentialBuckets(0.01, 2.5, 12)
	m := &Metrics{
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_agent_apply_seconds",
			Help:    "How long the applier took to put a desired config in force, by result (ok, error).",
			Buckets: buckets,
		}, []string{"result"}),
		check: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_agent_check_seconds",
			Help:    "How long one attempt of a health check took, by check name and result (pass, fail).",
			Buckets: buckets,
		}, []string{"check", "result"}),
	}
	for _, r := range []string{"ok", "error"} {
		m.apply.WithLabelValues(r) // listed (at 0) before the first apply
	}
	reg.MustRegister(m.apply, m.check)
	return m
}

// applied records an apply that took d.
func (m *Metrics) applied(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.apply.WithLabelValues(result(err, "ok", "error")).Observe(d.Seconds())
}

// timed returns specs with every check's attempts timed.
func (m *Metrics) timed(specs []CheckSpec) []CheckSpec {
	if m == nil {
		return specs
	}
	out := make([]CheckSpec, len(specs))
	for i, s := range specs {
		s.Check = timedCheck{Check: s.Check, m: m}
		out[i] = s
	}
	return out
}

// timedCheck is a Check whose every attempt is observed.
type timedCheck struct {
	Check
	m *Metrics
}

func (c timedCheck) Run(ctx context.Context, env CheckEnv) (string, error) {
	start := time.Now()
	out, err := c.Check.Run(ctx, env)
	c.m.check.WithLabelValues(c.Name(), result(err, "pass", "fail")).Observe(time.Since(start).Seconds())
	return out, err
}

func result(err error, ok, failed string) string {
	if err != nil {
		return failed
	}
	return ok
}

// Ready reports whether Run has bound the buckets, and why in one line.
func (a *Agent) Ready() (bool, string) { return a.readiness.Get() }
