package coordinator_test

import (
	"context"
	"strings"
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

// moveHeadWith is moveHead with strategy st.
func moveHeadWith(t *testing.T, env *natstest.Env, gen uint64, st *sluicev1.Strategy, intents ...*sluicev1.Intent) *sluicev1.Revision {
	t.Helper()
	ctx := context.Background()
	rev := &sluicev1.Revision{Id: render.RevisionID(intents), Intents: intents, CreatedAt: timestamppb.Now()}
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Create(ctx, rev.Id, rev); err != nil {
		t.Fatal(err)
	}
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	if _, err := heads.Mutate(ctx, contract.KeyHead, func(*sluicev1.Head) (*sluicev1.Head, error) {
		return &sluicev1.Head{Revision: rev.Id, Generation: gen, Strategy: st, Reason: "test"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	return rev
}

// waitEnded waits for rollout id to end and returns its record.
func waitEnded(t *testing.T, env *natstest.Env, id string) *sluicev1.Rollout {
	t.Helper()
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var got *sluicev1.Rollout
	// margin: the poll ends as soon as the rollout ends.
	natstest.Eventually(t, 60*time.Second, "rollout "+id+" to end", func() bool {
		e, err := rollouts.Get(context.Background(), id)
		got = e.Value
		return err == nil && contract.Terminal(e.Value.GetPhase())
	})
	return got
}

// TestCoordinator_AgentThatCannotReadItsConfig_IsSkippedAndNothingRecordedInvalid
// covers issue 38 item 2 through the loop: n2's agent reports its desired
// config INCOMPATIBLE (it needs a newer agent). The rollout goes on and
// succeeds on the others; n2 is listed skipped with its agent's reason,
// counted incompatible, a NodeIncompatible event says why, and no
// fingerprint is recorded invalid. Before, n2 was timed out at the pickup
// deadline, the good config recorded invalid (timed-out) and the rollout
// rolled back.
func TestCoordinator_AgentThatCannotReadItsConfig_IsSkippedAndNothingRecordedInvalid(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env)
	fleet := startFleet(t, env, 20*time.Millisecond, nil, "n1", "n2", "n3")
	fleet.mu.Lock()
	fleet.incompatible = map[string]bool{"n2": true}
	fleet.mu.Unlock()
	startCoordinator(t, env, "c1")
	// A short pickup deadline: the old path timed n2 out after it.
	rev := moveHeadWith(t, env, 1, &sluicev1.Strategy{MaxParallel: "1", PickupDeadline: durationpb.New(2 * time.Second)}, table("t1", 100))
	id := "1-" + render.Short(rev.Id)

	r := waitEnded(t, env, id)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || !strings.Contains(r.GetReason(), "cannot read") {
		t.Fatalf("rollout ended %s (%s); want Succeeded, saying a node's agent cannot read the config", r.GetPhase(), r.GetReason())
	}
	if c := r.GetCounts(); c.GetProvisioned() != 2 || c.GetSkipped() != 1 || c.GetIncompatible() != 1 || c.GetFailed() != 0 || c.GetTimedOut() != 0 {
		t.Fatalf("counts %v; want n1, n3 provisioned and n2 skipped as incompatible", c)
	}
	if sk := r.GetSkipped(); len(sk) != 1 || sk[0].GetNode() != "n2" || sk[0].GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
		t.Fatalf("skipped %v; want n2, incompatible", sk)
	}
	// margin: the poll ends as soon as the event arrives.
	natstest.Eventually(t, 30*time.Second, "a NodeIncompatible event for n2", func() bool { return evs.count("NodeIncompatible", "upgrade its agent") > 0 })
	bad := store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	keys, err := bad.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !contract.IsControlKey(k) {
			t.Fatalf("fingerprint %s recorded invalid; an agent's version is not the config's failure", k)
		}
	}
}
