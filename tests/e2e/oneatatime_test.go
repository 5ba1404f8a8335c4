package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// At most one rollout runs: a revision applied while another rolls out
// waits for it (queue, the default) or stops it once its in-flight nodes
// settled (supersede). Either way the fleet ends on the newest revision.

func TestOneRolloutAtATime_NewRevisionQueuesUntilTheRunningOneEnds(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	// Margin: the second apply must land while the first rollout runs;
	// one node at a time, 1s each, leaves it 3s after node-01 is seen applying.
	s := startSystem(t, env, t.TempDir(), 4, slowly(2*time.Second))
	waitRegistered(t, env, 4)
	first := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "1"})
	waitApplying(t, env, "node-01", contract.RolloutID(first.GetGeneration(), first.GetRevision()))
	second := apply(t, env, examplesWith(t, 301), &sluicev1.Strategy{MaxParallel: "2"})
	if second.GetWaitsFor() != contract.RolloutID(first.GetGeneration(), first.GetRevision()) {
		t.Errorf("second apply waits for %q; want the running rollout %s", second.GetWaitsFor(),
			contract.RolloutID(first.GetGeneration(), first.GetRevision()))
	}
	r1 := waitRolloutEnd(t, env, first.GetGeneration(), 60*time.Second)
	if r1.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r1.GetCounts().GetProvisioned() != 4 {
		t.Fatalf("the running rollout ended %s (%s) %v; want it to finish on all 4 nodes before the queued one starts",
			r1.GetPhase(), r1.GetReason(), r1.GetCounts())
	}
	r2 := waitRolloutEnd(t, env, second.GetGeneration(), 60*time.Second)
	if r2.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("the queued rollout ended %s (%s); want SUCCEEDED", r2.GetPhase(), r2.GetReason())
	}
	if !r2.GetStartedAt().AsTime().After(r1.GetFinishedAt().AsTime()) && !r2.GetStartedAt().AsTime().Equal(r1.GetFinishedAt().AsTime()) {
		t.Errorf("the queued rollout started at %s, before the running one ended at %s",
			r2.GetStartedAt().AsTime(), r1.GetFinishedAt().AsTime())
	}
	assertInvariants(t, s, r2)
}

func TestOneRolloutAtATime_SupersedeStopsTheRunningOneAfterItsInFlightNodes(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	// Margin: the superseding apply must land while node-01 applies (1s)
	// and before the others are done (3s more).
	s := startSystem(t, env, t.TempDir(), 4, slowly(2*time.Second))
	waitRegistered(t, env, 4)
	first := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "1"})
	waitApplying(t, env, "node-01", contract.RolloutID(first.GetGeneration(), first.GetRevision()))
	second := apply(t, env, examplesWith(t, 301), &sluicev1.Strategy{MaxParallel: "2", WhileActive: contract.WhileActiveSupersede})
	r1 := waitRolloutEnd(t, env, first.GetGeneration(), 60*time.Second)
	if r1.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED {
		t.Fatalf("the superseded rollout ended %s (%s); want ABORTED", r1.GetPhase(), r1.GetReason())
	}
	if c := r1.GetCounts(); c.GetProvisioned() == 0 || c.GetProvisioned() == 4 || c.GetInProgress() != 0 {
		t.Errorf("superseded rollout counts %v; want the node in flight at the supersede provisioned, not all 4, none left in progress", c)
	}
	r2 := waitRolloutEnd(t, env, second.GetGeneration(), 60*time.Second)
	if r2.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r2.GetCounts().GetProvisioned() != 4 {
		t.Fatalf("the superseding rollout ended %s (%s) %v; want SUCCEEDED on all 4 nodes", r2.GetPhase(), r2.GetReason(), r2.GetCounts())
	}
	assertInvariants(t, s, r2)
}

// waitApplying waits until node reports it is applying rollout's target:
// an agent acknowledges an operation once it has run a second, and the
// phase lasts until the apply ends, so the callers' applies take two
// seconds: a second of it for many of this poll's reads even on a loaded
// machine.
func waitApplying(t *testing.T, env *natstest.Env, node, rollout string) {
	t.Helper()
	_, status, _ := stores(env)
	natstest.Eventually(t, 60*time.Second, node+" to be applying rollout "+rollout, func() bool {
		st, err := status.Get(context.Background(), node)
		return err == nil && st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING && st.Value.GetRollout() == rollout
	})
}
