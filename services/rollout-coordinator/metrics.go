package coordinator

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Metrics are the coordinator's Prometheus metrics. The leader reports the
// rollout and the nodes; every instance reports its role. A nil *Metrics
// records nothing (tests, sluice dev).
type Metrics struct {
	isLeader     prometheus.Gauge
	term         prometheus.Gauge
	rolloutPhase *prometheus.GaugeVec // rollout, phase
	rolloutNodes *prometheus.GaugeVec // rollout, state
	nodes        *prometheus.GaugeVec // phase

	mu      sync.Mutex
	rollout string            // the rollout the rollout gauges are about
	phases  map[string]string // node → phase label, from the status bucket
}

// NewMetrics registers the coordinator's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_coordinator_is_leader",
			Help: "1 while this instance leads (holds the lease and has fenced the buckets for its term), 0 while it stands by.",
		}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_coordinator_term",
			Help: "The leadership term this instance leads, or the term of the leader it stands by for (0 before it knows).",
		}),
		rolloutPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_rollout_phase",
			Help: "1 for the phase the active (else the last) rollout is in, 0 for the other phases; reported by the leader.",
		}, []string{"rollout", "phase"}),
		rolloutNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_rollout_nodes",
			Help: "Nodes of the active (else the last) rollout by state, the categories of contract.TallyOf (the counts sluice rollout status prints): total, pending, in_progress, provisioned (succeeded), failed, timed_out (of the failed), skipped, incompatible (of the skipped), stopped (in flight when it stopped), not_started, reverting, reverted, revert_failed; reported by the leader.",
		}, []string{"rollout", "state"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_nodes",
			Help: "Nodes by the phase of their status (provisioning, provisioned, invalid), from the status bucket the leader watches.",
		}, []string{"phase"}),
		phases: map[string]string{},
	}
	reg.MustRegister(m.isLeader, m.term, m.rolloutPhase, m.rolloutNodes, m.nodes)
	return m
}

// role records whether this instance leads and the term.
func (m *Metrics) role(leading bool, term uint64) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
	}
	m.isLeader.Set(v)
	m.term.Set(float64(term))
}

// termEnded forgets what the term reported: only a leader reports the
// rollout and the nodes.
func (m *Metrics) termEnded() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollout = ""
	m.phases = map[string]string{}
	m.rolloutPhase.Reset()
	m.rolloutNodes.Reset()
	m.nodes.Reset()
}

// termStarted lists every node phase at 0, so that a phase no node is in
// reads 0 rather than missing.
func (m *Metrics) termStarted() {
	if m == nil {
		return
	}
	m.termEnded()
	for _, p := range []string{"provisioning", "provisioned", "invalid"} {
		m.nodes.WithLabelValues(p).Set(0)
	}
}

// rolloutPhases are the phases sluice_rollout_phase lists, in order.
var rolloutPhases = []sluicev1.RolloutPhase{
	sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING,
	sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED,
	sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED,
}

// phaseLabel is a phase as a metric label: "ROLLOUT_PHASE_ROLLED_BACK" is
// "rolled_back", "NODE_PHASE_PROVISIONED" "provisioned".
func phaseLabel(p interface{ String() string }, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), prefix))
}

// rolloutSeen records the rollout record the leader wrote (or loaded).
func (m *Metrics) rolloutSeen(r *sluicev1.Rollout) {
	if m == nil || r == nil || r.GetId() == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.GetId() != m.rollout {
		// One rollout at a time: the series of the one before go.
		m.rolloutPhase.Reset()
		m.rolloutNodes.Reset()
		m.rollout = r.GetId()
	}
	for _, p := range rolloutPhases {
		v := 0.0
		if p == r.GetPhase() {
			v = 1
		}
		m.rolloutPhase.WithLabelValues(r.GetId(), phaseLabel(p, "ROLLOUT_PHASE_")).Set(v)
	}
	// The states are contract.TallyOf's categories (one definition of what
	// is counted), snake_cased; the revert states are 0 until a revert.
	t := contract.TallyOf(r)
	counts := map[string]uint32{"total": t.Total, contract.CountReverting: 0, contract.CountReverted: 0, contract.CountRevertFailed: 0}
	for _, c := range append(append([]contract.Category(nil), t.Nodes...), t.Revert...) {
		counts[c.Key] = c.N
		for _, of := range c.Of {
			counts[of.Key] = of.N
		}
	}
	for key, n := range counts {
		m.rolloutNodes.WithLabelValues(r.GetId(), contract.Snake(key)).Set(float64(n))
	}
}

// nodePhase records a node's status phase; nil forgets the node (its
// status was deleted).
func (m *Metrics) nodePhase(node string, st *sluicev1.NodeStatus) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.phases[node]
	if st == nil {
		if ok {
			m.nodes.WithLabelValues(old).Dec()
			delete(m.phases, node)
		}
		return
	}
	p, known := nodePhaseLabels[st.GetPhase()]
	if !known {
		p = phaseLabel(st.GetPhase(), "NODE_PHASE_")
	}
	if ok && old == p {
		return
	}
	if ok {
		m.nodes.WithLabelValues(old).Dec()
	}
	// One entry per node: its key a copy (node may be cut from a message
	// subject, and a map assignment stores the key it is given), its label
	// one string per phase.
	m.phases[strings.Clone(node)] = p
	m.nodes.WithLabelValues(p).Inc()
}

// nodePhaseLabels is every node phase's label, made once.
var nodePhaseLabels = func() map[sluicev1.NodePhase]string {
	out := map[sluicev1.NodePhase]string{}
	for v := range sluicev1.NodePhase_name {
		p := sluicev1.NodePhase(v)
		out[p] = phaseLabel(p, "NODE_PHASE_")
	}
	return out
}()
