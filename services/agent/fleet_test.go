package agent_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// TestAgent_ManyOnOneConn_TwoGoroutinesEach runs agents the way the
// benchmark does — one shared connection, JetStream context and buckets, no
// state on disk — and checks each costs two goroutines and no consumer.
func TestAgent_ManyOnOneConn_TwoGoroutinesEach(t *testing.T) {
	const n = 200
	f := newFleet(t, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	before := runtime.NumGoroutine()
	for i := range n {
		a, err := agent.New(agent.Config{
			Conn: f.env.Conn, Settings: f.env.Settings, JetStream: f.env.JS, Buckets: f.env.Buckets,
			Node: fmt.Sprintf("sim-%03d", i),
			Applier: agent.ApplierFunc(func(context.Context, *sluicev1.DesiredConfig) error {
				return nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- a.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})
	natstest.Eventually(t, 30*time.Second, "every agent registered", func() bool {
		keys, err := f.nodes.Keys(context.Background())
		return err == nil && len(keys) == n
	})
	if extra := runtime.NumGoroutine() - before; extra > 2*n+20 {
		t.Errorf("%d agents added %d goroutines, want about %d", n, extra, 2*n)
	}
	want := map[string]string{} // node → the fingerprint written for it
	for i := range n {
		node := fmt.Sprintf("sim-%03d", i)
		d := desiredConfig(node, node, uint32(100+i))
		want[node] = d.Fingerprint
		f.writeDesired(t, d)
	}
	natstest.Eventually(t, 30*time.Second, "every agent Provisioned", func() bool {
		sts, err := f.statuses.List(context.Background(), ">")
		if err != nil || len(sts) != n {
			return false
		}
		for _, s := range sts {
			if s.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED || s.Value.GetFingerprint() != want[s.Key] {
				return false
			}
		}
		return true
	})
	st, err := f.env.JS.Stream(context.Background(), "KV_"+contract.BucketNodeConfigs)
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Consumers != 0 {
		t.Fatalf("nodeconfigs stream has %d consumers, want 0", si.State.Consumers)
	}
}
