package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A value is bound to its key: a presence or status written under one
// node's key that names another node (what a compromised agent would write
// to act as another) counts for neither, and is reported as unreadable (the
// store's check, pkg/contract/wellformed).
func TestCoordinator_ValueNamingAnotherNode_IsSkippedAndReported(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	startFleet(t, env, 20*time.Millisecond, nil, "n1", "n2", "n3")
	// "rogue" claims to be the presence of n5, which has no agent: taken at
	// its word, n5 would be placed in the rollout and time it out.
	presence := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if _, err := presence.Create(ctx, "rogue", &sluicev1.NodePresence{Node: "n5", Labels: map[string]string{"zone": "a"}}); err != nil {
		t.Fatal(err)
	}
	// And a status under "rogue" naming n1 as invalid.
	status := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if _, err := status.Create(ctx, "rogue", &sluicev1.NodeStatus{Node: "n1", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, env)
	startCoordinator(t, env, "c1")
	rev := moveHead(t, env, 1, "3", table("t1", 100))
	r := waitRollout(t, env, "1-"+render.Short(rev.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	if c := r.GetCounts(); c.GetTotal() != 3 || c.GetProvisioned() != 3 {
		t.Fatalf("counts %v: want the three real nodes only", c)
	}
	// margin: the poll ends as soon as both events arrived.
	evs.wait(t, "ValueUnreadable", contract.BucketNodes+"/rogue")
	evs.wait(t, "ValueUnreadable", contract.BucketStatus+"/rogue")
}
