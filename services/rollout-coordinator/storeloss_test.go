package coordinator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// I10, the coordinator's part: a head cut on a lost store (the first apply
// after a wipe, taken before the agents' presence said what they run) is
// not rolled out while live nodes run a revision the store does not hold;
// it is once an operator confirms.
func TestCoordinator_StoreLost_StartsNoRolloutUntilConfirmed(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	startFleet(t, env, 0, nil, "n1", "n2")
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	for _, n := range []string{"n1", "n2"} { // their agents' last-good, from the store that was lost
		if _, err := nodes.Mutate(ctx, n, func(p *sluicev1.NodePresence) (*sluicev1.NodePresence, error) {
			p.InForceRevision, p.InForceFingerprint = "110b0b1c2d3e4f5a", "fp-old"
			return p, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	rev := moveHead(t, env, 1, "5", table("partial", 42))
	startCoordinator(t, env, "c1")
	id := contract.RolloutID(1, rev.Id)

	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	// The hold is an event: wait for it, then check nothing was written.
	natstest.Eventually(t, 30*time.Second, "RolloutHeld", func() bool {
		st, err := env.JS.Stream(ctx, contract.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, contract.EventSubject(contract.KindRollout, id))
		if err != nil {
			return false
		}
		ev := &sluicev1.Event{}
		return store.Unmarshal(m.Data, ev) == nil && ev.GetType() == "RolloutHeld"
	})
	if _, err := rollouts.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rollout %s on a lost store: %v, want none", id, err)
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := configs.Get(ctx, contract.DesiredKey(n)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("desired config of %s on a lost store: %v, want none", n, err)
		}
	}

	control := store.New(env.Buckets.Control, func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} })
	if _, err := control.Create(ctx, contract.KeyStoreConfirm, &sluicev1.StoreConfirm{By: "ops", At: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
}
