package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// wrappedKV is a bucket seen through another type, as a test's fault
// injection sees it.
type wrappedKV struct{ jetstream.KeyValue }

// A Direct store keeps every promise of a Store's writes: compare-and-set
// (a stale revision, a create over a live key: ErrConflict, on R3 too,
// where the server's error differs), a create over a deleted key, values
// stored as readable JSON; and a wrapped bucket is not bypassed.
func testDirectWritesAreCompareAndSet(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	plain := store.New(env.Buckets.Status, newStatus)
	s := plain.Direct(env.Conn)
	if s == plain {
		t.Fatal("Direct over the client's own bucket handle returned the store unchanged")
	}
	if w := store.New[*sluicev1.NodeStatus](wrappedKV{env.Buckets.Status}, newStatus); w.Direct(env.Conn) != w {
		t.Fatal("Direct over a wrapped bucket bypassed the wrapper")
	}

	rev, err := s.Create(ctx, "direct", &sluicev1.NodeStatus{Node: "direct", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Create(ctx, "direct", &sluicev1.NodeStatus{Node: "direct"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	rev2, err := s.Update(ctx, "direct", &sluicev1.NodeStatus{Node: "direct", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED}, rev)
	if err != nil || rev2 <= rev {
		t.Fatalf("update at the current revision: revision %d after %d, %v", rev2, rev, err)
	}
	if _, err := s.Update(ctx, "direct", &sluicev1.NodeStatus{Node: "direct", Message: "late"}, rev); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at a stale revision: got %v, want ErrConflict", err)
	}
	got, err := latest(t, env, plain, "direct")
	if err != nil || got.Revision != rev2 || got.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("after the writes: %v at %d, %v; want PROVISIONED at %d", got.Value, got.Revision, err, rev2)
	}
	raw, err := env.Buckets.Status.Get(ctx, "direct")
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw.Value(), &fields); err != nil || fields["phase"] != "NODE_PHASE_PROVISIONED" {
		t.Fatalf("stored %s (%v), want readable JSON with phase NODE_PHASE_PROVISIONED", raw.Value(), err)
	}

	// A key deleted (the reaper's way: compare-and-set) is created again.
	if err := plain.Delete(ctx, "direct", rev2); err != nil {
		t.Fatal(err)
	}
	// On R3 the create reads the delete marker with a direct get, which a
	// replica may answer before it applied the delete: the key then looks
	// live and the create conflicts until it has (callers retry, as the
	// agent's presence and status writes do). Not on the leader's answer.
	var rev3 uint64
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		rev3, err = s.Create(ctx, "direct", &sluicev1.NodeStatus{Node: "direct", Message: "again"})
		if !errors.Is(err, store.ErrConflict) || time.Since(start) > 2*time.Second {
			break
		}
	}
	if err != nil || rev3 <= rev2 {
		t.Fatalf("create over the deleted key: revision %d, %v", rev3, err)
	}
	if got, err := latest(t, env, plain, "direct"); err != nil || got.Value.GetMessage() != "again" {
		t.Fatalf("after the create over the deleted key: %v, %v", got.Value, err)
	}
}
