package configurator

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Metrics are the configurator's Prometheus metrics: the sync state of each
// registry. A nil *Metrics records nothing (tests, sluice dev).
type Metrics struct {
	state    *prometheus.GaugeVec // registry, state
	lastSync *prometheus.GaugeVec // registry
	failures *prometheus.GaugeVec // registry
}

// NewMetrics registers the configurator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_registry_state",
			Help: "1 for the state a registry is in (syncing, synced, unreachable, held, invalid), 0 for the others; as `sluice get registries` shows it.",
		}, []string{"registry", "state"}),
		lastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_registry_last_sync_timestamp_seconds",
			Help: "When a registry was last synced successfully (unix seconds); absent before its first successful sync.",
		}, []string{"registry"}),
		failures: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_registry_consecutive_failures",
			Help: "Syncs of a registry that failed in a row (a fetch or its commit); 0 after a successful one.",
		}, []string{"registry"}),
	}
	reg.MustRegister(m.state, m.lastSync, m.failures)
	return m
}

// registryStates are the states sluice_registry_state lists.
var registryStates = []sluicev1.RegistryState{
	sluicev1.RegistryState_REGISTRY_STATE_SYNCING, sluicev1.RegistryState_REGISTRY_STATE_SYNCED,
	sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE, sluicev1.RegistryState_REGISTRY_STATE_HELD,
	sluicev1.RegistryState_REGISTRY_STATE_INVALID,
}

// status records a registry's status as written.
func (m *Metrics) status(st *sluicev1.RegistryStatus) {
	if m == nil || st == nil {
		return
	}
	name := st.GetName()
	for _, s := range registryStates {
		v := 0.0
		if s == st.GetState() {
			v = 1
		}
		m.state.WithLabelValues(name, strings.ToLower(strings.TrimPrefix(s.String(), "REGISTRY_STATE_"))).Set(v)
	}
	if st.GetLastSync() != nil {
		m.lastSync.WithLabelValues(name).Set(float64(st.GetLastSync().AsTime().UnixMilli()) / 1000)
	}
}

// failed records how many syncs of registry name failed in a row.
func (m *Metrics) failed(name string, n int) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(name).Set(float64(n))
}

// removed forgets a registry that is no longer synced.
func (m *Metrics) removed(name string) {
	if m == nil {
		return
	}
	m.state.DeletePartialMatch(prometheus.Labels{"registry": name})
	m.lastSync.DeleteLabelValues(name)
	m.failures.DeleteLabelValues(name)
}
