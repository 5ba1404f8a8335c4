package dashboard_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/cmd/sluice/internal/dashboard"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// statesIn is each node's category in u's fleet, by name.
func statesIn(data []byte) map[string]string {
	var u struct {
		Fleet *struct {
			Names  []string
			State  []int
			States []string
		}
	}
	out := map[string]string{}
	if json.Unmarshal(data, &u) != nil || u.Fleet == nil {
		return out
	}
	for i, n := range u.Fleet.Names {
		out[n] = u.Fleet.States[u.Fleet.State[i]]
	}
	return out
}

// TestFleet_NodeWrittenNotYetAcknowledged_IsInProgress: the record counts
// a node in progress from the moment its config is written; until its
// agent acknowledges, its status names its old config. The map drew it
// pending, against the counts (issue 42 item 1); the dashboard reads the
// desired config of a node it would place pending and draws it in
// progress, being written — one written before it started and one
// written while it runs — while a node not written yet stays pending.
func TestFleet_NodeWrittenNotYetAcknowledged_IsInProgress(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	now := timestamppb.Now()
	nodes := []string{"node-01", "node-02", "node-03"}
	for _, n := range nodes {
		if _, err := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Create(ctx, n,
			&sluicev1.NodePresence{Node: n, Labels: map[string]string{"zone": "zone-a"}, AgentVersion: "dev", StartedAt: now, HeartbeatAt: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).Create(ctx, n,
			&sluicev1.NodeStatus{Node: n, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: "rev-1", Rollout: "1-rev1", Fingerprint: "f1", LastUpdate: now}); err != nil {
			t.Fatal(err)
		}
	}
	// node-03's desired config is the last rollout's, written before this one started.
	old, cfg := &sluicev1.NodeConfig{}, &sluicev1.NodeConfig{}
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := configs.Create(ctx, contract.DesiredKey("node-03"), &sluicev1.DesiredConfig{Node: "node-03", Rollout: "1-rev1", Revision: "rev-1", Fingerprint: render.Fingerprint(old), Config: old}); err != nil {
		t.Fatal(err)
	}
	r := &sluicev1.Rollout{Id: "2-rev2", Revision: "rev-2", Generation: 2, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		StartedAt: timestamppb.New(time.Now().Add(-500 * time.Millisecond)), Strategy: &sluicev1.Strategy{MaxParallel: "2"},
		Counts: &sluicev1.RolloutCounts{Total: 3, InProgress: 2, Pending: 1, Attempted: 2}}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, r.GetId(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyActive,
		&sluicev1.RolloutRef{Rollout: r.GetId(), Revision: "rev-2", Generation: 2}); err != nil {
		t.Fatal(err)
	}
	write := func(node string) {
		t.Helper()
		if _, err := configs.Mutate(ctx, contract.DesiredKey(node), func(*sluicev1.DesiredConfig) (*sluicev1.DesiredConfig, error) {
			return &sluicev1.DesiredConfig{Node: node, Rollout: r.GetId(), Revision: "rev-2", Fingerprint: render.Fingerprint(cfg), Config: cfg}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	write("node-01") // before the dashboard starts
	s := serve(t, env, dashboard.Options{Interval: 50 * time.Millisecond})
	ch, _ := s.stream(t, "")
	placed := map[string]string{}
	wait := func(what string, want map[string]string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			match := true
			for n, k := range want {
				match = match && placed[n] == k
			}
			if match {
				return
			}
			select {
			case m := <-ch:
				for n, k := range statesIn(m.data) {
					placed[n] = k
				}
			case <-deadline:
				t.Fatalf("%s: the map places %v, want %v", what, placed, want)
			}
		}
	}
	wait("node-01 written before the start", map[string]string{"node-01": contract.CountInProgress, "node-02": contract.CountPending, "node-03": contract.CountPending})
	write("node-02")
	wait("node-02 written while it runs", map[string]string{"node-01": contract.CountInProgress, "node-02": contract.CountInProgress, "node-03": contract.CountPending})
}
