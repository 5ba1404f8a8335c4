package rollout

import (
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A head with no node to change starts and ends in one decision: two
// rounds of settle. Within the bound nothing is reported; with a bound of
// one round the chain is cut and says so.
func TestDecide_SettlesOrSaysItDidNot(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	r1 := testRev("1-aaaaaaaaaaaa")
	unsettled := func(acts []Action) bool {
		for _, a := range acts {
			if e, ok := a.(Emit); ok && e.Event.GetType() == "DecisionUnsettled" {
				return true
			}
		}
		return false
	}
	ended := func(acts []Action) bool {
		for _, a := range acts {
			if f, ok := a.(FinishRollout); ok && f.Rollout.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
				return true
			}
		}
		return false
	}

	acts := Decide(NewState(), Loaded{Head: head(1, r1.Id, "1"), HeadRev: r1}, t0)
	if !ended(acts) || unsettled(acts) {
		t.Fatalf("a head with no nodes: want it started and ended in one decision, settled; got %v", summarize(acts))
	}

	defer func(n int) { settleRounds = n }(settleRounds)
	settleRounds = 1
	acts = Decide(NewState(), Loaded{Head: head(1, r1.Id, "1"), HeadRev: r1}, t0)
	if !unsettled(acts) {
		t.Fatalf("with one round, the start-and-end chain is cut: want a DecisionUnsettled event; got %v", summarize(acts))
	}
}
