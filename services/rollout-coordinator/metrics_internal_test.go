package coordinator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The rollout node gauge has a state per category of contract.TallyOf,
// incompatible (of the skipped) included, and the revert states at 0
// before a revert.
func TestMetrics_RolloutNodes_AreTallyOfsCategories(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.rolloutSeen(&sluicev1.Rollout{Id: "r1", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 2, InProgress: 1, Skipped: 2, Incompatible: 1}})
	for state, want := range map[string]float64{"total": 5, "provisioned": 2, "in_progress": 1, "skipped": 2,
		"incompatible": 1, "not_started": 0, "revert_failed": 0} {
		if got := testutil.ToFloat64(m.rolloutNodes.WithLabelValues("r1", state)); got != want {
			t.Errorf("state %s = %v, want %v", state, got, want)
		}
	}
	if n := testutil.CollectAndCount(m.rolloutNodes); n != 13 {
		t.Errorf("%d states, want 13 (total, 7 forward, timed_out, incompatible, 3 revert)", n)
	}
}
