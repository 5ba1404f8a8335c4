package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// assertFleetRuns checks every node reports Provisioned with its expected
// fingerprint and has that config in force on disk.
func assertFleetRuns(t *testing.T, s *system, want map[string]string) {
	t.Helper()
	status := store.New(s.env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	for node, fp := range want {
		e, err := status.Get(context.Background(), node)
		if err != nil {
			t.Fatalf("%s status: %v", node, err)
		}
		if e.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED || e.Value.GetFingerprint() != fp {
			t.Errorf("%s: phase %s fingerprint %.12s, want PROVISIONED %.12s", node, e.Value.GetPhase(), e.Value.GetFingerprint(), fp)
		}
		b, err := os.ReadFile(filepath.Join(s.dir, node, "config.json"))
		if err != nil {
			t.Fatalf("%s config on disk: %v", node, err)
		}
		var onDisk sluicev1.DesiredConfig
		if err := store.Unmarshal(b, &onDisk); err != nil || onDisk.GetFingerprint() != fp {
			t.Errorf("%s config on disk has fingerprint %.12s (%v), want %.12s", node, onDisk.GetFingerprint(), err, fp)
		}
	}
}

func TestEndToEnd_ExamplesReachEveryNode(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 20, nil)
	waitRegistered(t, env, 20)

	resp := applyExamples(t, env, "5")
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 20 {
		t.Fatalf("rollout ended %s (%s), counts %v; want SUCCEEDED on 20 nodes", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	want := expectedFingerprints(t, env, resp.GetRevision(), s.labels)
	distinct := map[string]bool{}
	for _, fp := range want {
		distinct[fp] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("the examples should render different configs for different zones; got %d distinct", len(distinct))
	}
	assertFleetRuns(t, s, want)

	// Applying the same intents again changes nothing and starts no rollout.
	ctx := context.Background()
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	h, err := heads.Get(ctx, contract.KeyHead)
	if err != nil || h.Value.GetGeneration() != resp.GetGeneration() {
		t.Fatalf("head = %v, %v", h.Value, err)
	}
}

func TestEndToEnd_RestartMidRolloutFinishesTheRollout(t *testing.T) {
	dataDir, agentsDir := t.TempDir(), t.TempDir()
	env := natstest.StartAt(t, dataDir, "127.0.0.1:-1", contract.DefaultSettings())
	var applies atomic.Int32
	slow := func(_ string, a agent.Applier) agent.Applier {
		return agent.ApplierFunc(func(ctx context.Context, d *sluicev1.DesiredConfig) error {
			applies.Add(1)
			select {
			case <-time.After(150 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return a.Apply(ctx, d)
		})
	}
	const n = 10
	s := startSystem(t, env, agentsDir, n, slow)
	waitRegistered(t, env, n)
	resp := applyExamples(t, env, "2")

	status := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	natstest.Eventually(t, 60*time.Second, "some nodes provisioned", func() bool {
		all, _ := status.List(context.Background(), ">")
		done := 0
		for _, e := range all {
			if e.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
				done++
			}
		}
		return done >= 3
	})
	// Stop everything mid-rollout: services, agents and the server.
	s.stop()
	env.Server.Shutdown()
	env.Server.WaitForShutdown()

	env2 := natstest.StartAt(t, dataDir, "127.0.0.1:-1", contract.DefaultSettings())
	heads := store.New(env2.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	if h, err := heads.Get(context.Background(), contract.KeyHead); err != nil || h.Value.GetRevision() != resp.GetRevision() {
		t.Fatalf("after restart head = %v, %v; want revision %s", h.Value, err, resp.GetRevision())
	}
	s2 := startSystem(t, env2, agentsDir, n, slow)
	r := waitRolloutEnd(t, env2, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != n {
		t.Fatalf("rollout ended %s (%s), counts %v; want SUCCEEDED on %d nodes", r.GetPhase(), r.GetReason(), r.GetCounts(), n)
	}
	assertFleetRuns(t, s2, expectedFingerprints(t, env2, resp.GetRevision(), s2.labels))
	if got := applies.Load(); got > n+4 { // + 2 interrupted re-applied + 2 restored at start
		t.Errorf("%d applies for %d nodes: nodes finished before the restart were applied again", got, n)
	}
}
