package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/tests/bench"
)

// The benchmark's figures are only worth quoting if the harness measures
// what it says: a small run must succeed and report consistent numbers.
func TestBench_SmallRunReportsConsistentFigures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := bench.Run(ctx, bench.Options{Nodes: 40, MaxParallel: 10, ApplyLatency: 20 * time.Millisecond,
		StoreDir: t.TempDir(), Log: zerolog.Nop(), FailWave: 2})
	if err != nil {
		t.Fatalf("bench run: %v (%+v)", err, res)
	}
	if res.Phase != "ROLLOUT_PHASE_SUCCEEDED" || res.Rollout == "" {
		t.Fatalf("rollout %q ended %s", res.Rollout, res.Phase)
	}
	if res.IdealMS != 80 {
		t.Errorf("ideal_ms = %d, want ceil(40/10)*20 = 80", res.IdealMS)
	}
	if res.WallMS < float64(res.IdealMS) || res.OverheadRatio < 1 {
		t.Errorf("wall %.1fms is below the ideal %dms: the clock is wrong", res.WallMS, res.IdealMS)
	}
	// desired + Provisioning + Provisioned per node, plus a few revision, intent and rollout writes.
	if res.KVWritesPerNode < 3 || res.KVWritesPerNode > 4 {
		t.Errorf("kv_writes_per_node = %.2f, want 3-4", res.KVWritesPerNode)
	}
	// The failure scenario: the first node of wave 2 (node 11) fails; waves
	// 1 and 2 (up to 30 nodes, 10 at a time) are touched and reverted.
	if res.FailPhase != "ROLLOUT_PHASE_ROLLED_BACK" || res.FailedNode != "node-00011" {
		t.Errorf("failure scenario: %s failed, rollout ended %s; want node-00011 and ROLLED_BACK", res.FailedNode, res.FailPhase)
	}
	if res.Touched < 11 || res.Touched > 30 || res.RevertMS <= 0 {
		t.Errorf("failure scenario: %d touched nodes, revert_ms %.1f; want 11-30 touched and a positive time", res.Touched, res.RevertMS)
	}
	if res.JetStreamConsumers < 1 || res.JetStreamConsumers > 6 {
		t.Errorf("jetstream_consumers = %d: agents must not hold consumers; the coordinator holds a few", res.JetStreamConsumers)
	}
}
