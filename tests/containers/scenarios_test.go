//go:build containers

package containers

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// rolloutTimeout bounds every rollout of the scenarios: four nodes one at a
// time, a fault, and a takeover or a node lease on top.
const rolloutTimeout = 3 * time.Minute

// slack absorbs the test's own polling when it compares a rollout's leader
// time with the leaderless gap it measured.
const slack = time.Second

// oneAtATime is the scenarios' strategy: one node at a time, so a fault
// always lands in the middle of the rollout.
func oneAtATime() *sluicev1.Strategy {
	return &sluicev1.Strategy{MaxParallel: "1", PickupDeadline: durationpb.New(3 * time.Minute)}
}

// TestCluster runs the scenarios one after the other on one system: each
// starts from the whole system (heal), rolls a new routing table out to
// every node and puts one fault in the middle of it. Sharing the system
// weakens none of them — each rollout is new and covers every node — and
// saves starting eleven containers seven times.
func TestCluster(t *testing.T) {
	c := startCluster(t)

	began := time.Now()
	base := c.apply(t, intentsWith(t, 400), &sluicev1.Strategy{MaxParallel: "2", FailureDomain: "zone"})
	r := c.waitEnd(t, base.rollout, rolloutTimeout)
	c.assertSucceeded(t, r, allNodes()...)
	c.assertInvariants(t, r)
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("first rollout %s over %d nodes, zone by zone: %s in %s", r.GetId(), r.GetCounts().GetTotal(), r.GetPhase(), time.Since(began).Round(100*time.Millisecond))

	for _, sc := range []struct {
		name string
		run  func(*testing.T, *cluster)
	}{
		{"NatsCLI_ShowsReadableStateEventsAndServices", testNatsCLI},
		{"LeadingCoordinatorKilledMidRollout_StandbyTakesOverAndRevertsNothing", testCoordinatorKilled},
		{"NATSServerKilledMidRollout_NoAcknowledgedWriteLost", testNATSServerKilled},
		{"AgentCutOffBriefly_CountedAfterReconnect", testAgentCutOffBriefly},
		{"AgentCutOffPastItsLease_SkippedThenRejoinsWithTheTarget", testAgentCutOffPastItsLease},
		{"AgentCutOffWhileNoCoordinatorLeads_LeftOutThenRejoinsWithTheTarget", testAgentCutOffWhileNoCoordinatorLeads},
		{"AgentRestartedMidApply_RestoresThenProvisions", testAgentRestartedMidApply},
	} {
		t.Run(sc.name, func(t *testing.T) {
			began := time.Now()
			c.heal(t)
			sc.run(t, c)
			t.Logf("%s took %s", sc.name, time.Since(began).Round(100*time.Millisecond))
		})
	}
}
