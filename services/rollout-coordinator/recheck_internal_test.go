package coordinator

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// TestLoop_AtItsDeadline_ANodesStatusIsReadAgain: a node whose final
// report the watch never delivered (its consumer sat on a server that
// stopped: chaos seed 12) is not timed out when the bucket has the report:
// at the deadline the loop reads the status again and hands it to decide.
// Without a report in the bucket the node still times out.
func TestLoop_AtItsDeadline_ANodesStatusIsReadAgain(t *testing.T) {
	rev := &sluicev1.Revision{Id: "rev0000000000001", Intents: []*sluicev1.Intent{
		{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}}}
	head := &sluicev1.Head{Revision: rev.Id, Generation: 1,
		Strategy: &sluicev1.Strategy{MaxParallel: "1", ApplyDeadline: durationpb.New(time.Minute)}}
	for _, tc := range []struct {
		name        string
		inTheBucket bool
		want        sluicev1.RolloutPhase
	}{
		{"the report is in the bucket", true, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED},
		{"no report anywhere", false, sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING}, // timed out, over the budget of 0
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
			m := newMemEffects()
			var emitted []*sluicev1.Event
			lp := &loop{cfg: Config{Now: func() time.Time { return now }}, fx: m, st: rollout.NewState(), log: zerolog.Nop(),
				emit:      func(e *sluicev1.Event) { emitted = append(emitted, e) },
				status:    store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
				statusRev: map[string]uint64{}, quarantined: map[string]bool{}}
			if err := lp.step(ctx, rollout.Loaded{Head: head, HeadRev: rev, Term: 1,
				Presence: []*sluicev1.NodePresence{{Node: "n1"}}}); err != nil {
				t.Fatal(err)
			}
			d := m.desired["n1"]
			if d == nil {
				t.Fatal("n1 was not written")
			}
			report := func(phase sluicev1.NodePhase) *sluicev1.NodeStatus {
				return &sluicev1.NodeStatus{Node: "n1", Phase: phase, Fingerprint: d.GetFingerprint(), Rollout: d.GetRollout(),
					Revision: d.GetRevision(), Operation: d.GetOperation()}
			}
			// The acknowledgement arrives through the watch …
			if err := lp.step(ctx, rollout.Status{S: report(sluicev1.NodePhase_NODE_PHASE_PROVISIONING)}); err != nil {
				t.Fatal(err)
			}
			// … the final report lands in the bucket only.
			if tc.inTheBucket {
				statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
				if _, err := statuses.Create(ctx, "n1", report(sluicev1.NodePhase_NODE_PHASE_PROVISIONED)); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(2 * time.Minute) // past the apply deadline
			if err := lp.recheckOverdue(ctx); err != nil {
				t.Fatal(err)
			}
			if err := lp.step(ctx, rollout.Tick{}); err != nil {
				t.Fatal(err)
			}
			r := m.records[contract.RolloutID(1, rev.Id)]
			timedOut := slices.Contains(types(emitted), "NodeTimedOut")
			if r.GetPhase() != tc.want || timedOut == tc.inTheBucket {
				t.Fatalf("rollout %s (%s), events %v; want %s", r.GetPhase(), r.GetReason(), types(emitted), tc.want)
			}
		})
	}
}

func types(evs []*sluicev1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.GetType())
	}
	return out
}
