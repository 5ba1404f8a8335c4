package coordinator_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A standby that takes over mid-bake continues the first leader's bake
// (the record's bakeUntil) instead of starting it over: wave 2 starts when
// the first leader's bake ends.
func TestCoordinator_TakeoverMidBake_ContinuesTheCountdown(t *testing.T) {
	const bake = 4 * time.Second
	s := contract.DefaultSettings()
	s.LeaderLease = 600 * time.Millisecond
	env := natstest.Start(t, s)
	startFleet(t, env, 50*time.Millisecond, nil, "n1", "n2", "n3")
	stopFirst := startCoordinator(t, env, "c1")
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	holder := func() string {
		e, err := leases.Get(context.Background(), contract.LeaseCoordinator)
		if err != nil {
			return ""
		}
		return e.Value.GetHolder()
	}
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "c1 to lead", func() bool { return holder() == "c1" })
	startCoordinator(t, env, "c2")

	ctx := context.Background()
	intents := []*sluicev1.Intent{table("t1", 100)}
	rev := &sluicev1.Revision{Id: render.RevisionID(intents), Intents: intents, CreatedAt: timestamppb.Now()}
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Create(ctx, rev.Id, rev); err != nil {
		t.Fatal(err)
	}
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	if _, err := heads.Mutate(ctx, contract.KeyHead, func(*sluicev1.Head) (*sluicev1.Head, error) {
		return &sluicev1.Head{Revision: rev.Id, Generation: 1, Reason: "test",
			Strategy: &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, BakeTime: durationpb.New(bake)}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	id := contract.RolloutID(1, rev.Id)
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	record := func() *sluicev1.Rollout {
		e, err := rollouts.Get(ctx, id)
		if err != nil {
			return nil
		}
		return e.Value
	}
	var first *sluicev1.Rollout
	natstest.Eventually(t, 30*time.Second, "wave 1 to bake", func() bool {
		first = record()
		return first.GetBakeUntil() != nil
	})
	until := first.GetBakeUntil().AsTime()
	// Well inside the bake: a bake started over at the takeover would end
	// this much after the first leader's.
	time.Sleep(time.Until(until.Add(-bake / 2)))
	stopFirst()
	var second *sluicev1.Rollout
	natstest.Eventually(t, 30*time.Second, "c2 to take over and write the record", func() bool {
		second = record()
		return second.GetLeaderEpoch() > first.GetLeaderEpoch()
	})
	if second.GetWave() == 1 && (second.GetBakeUntil() == nil || !second.GetBakeUntil().AsTime().Equal(until)) {
		t.Fatalf("after the takeover the record's bakeUntil is %v, want the first leader's %s", second.GetBakeUntil(), until)
	}
	r := waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	if st := r.GetStages(); len(st) != 2 || st[1].GetStartedAt().AsTime().Before(until) || st[1].GetStartedAt().AsTime().After(until.Add(bake/2)) {
		t.Fatalf("stages %v: want wave 2 started at the first leader's bake end %s (within %s)", st, until, bake/2)
	}
}
