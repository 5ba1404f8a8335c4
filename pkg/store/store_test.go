package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func newStatus() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }

func TestStore_WritesAreCompareAndSet(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)

	rev, err := s.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	if _, err := s.Update(ctx, "n1", &sluicev1.NodeStatus{Node: "n1"}, rev+5); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at stale revision: got %v, want ErrConflict", err)
	}
	if _, err := s.Update(ctx, "n1", &sluicev1.NodeStatus{Node: "n1", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED}, rev); err != nil {
		t.Fatalf("update at current revision: %v", err)
	}
	got, err := s.Get(ctx, "n1")
	if err != nil || got.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("get: %v %v", got.Value, err)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: got %v, want ErrNotFound", err)
	}
}

func TestStore_MutateRetriesOnConflict(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)
	if _, err := s.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1", Message: "a"}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err := s.Mutate(ctx, "n1", func(cur *sluicev1.NodeStatus) (*sluicev1.NodeStatus, error) {
		calls++
		if calls == 1 { // a concurrent writer gets in between our read and write
			e, _ := s.Get(ctx, "n1")
			if _, err := s.Update(ctx, "n1", &sluicev1.NodeStatus{Node: "n1", Message: "b"}, e.Revision); err != nil {
				t.Fatal(err)
			}
		}
		return &sluicev1.NodeStatus{Node: "n1", Message: cur.GetMessage() + "+"}, nil
	})
	if err != nil {
		t.Fatalf("mutate: %v", err)
	}
	got, _ := s.Get(ctx, "n1")
	if calls != 2 || got.Value.GetMessage() != "b+" {
		t.Fatalf("calls=%d message=%q, want 2 and b+", calls, got.Value.GetMessage())
	}
}

func TestStore_ValuesAreReadableJSON(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)
	if _, err := s.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID}); err != nil {
		t.Fatal(err)
	}
	e, err := env.Buckets.Status.Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	// protojson varies its whitespace on purpose; compare the JSON itself.
	var got map[string]any
	if err := json.Unmarshal(e.Value(), &got); err != nil {
		t.Fatalf("stored value is not JSON: %s: %v", e.Value(), err)
	}
	if got["node"] != "n1" || got["phase"] != "NODE_PHASE_INVALID" || len(got) != 2 {
		t.Fatalf("stored %s, want node n1 and phase NODE_PHASE_INVALID", e.Value())
	}
}

func TestStore_ExpiredPresenceIsSeenByWatchers(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = time.Second
	env := natstest.Start(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	w, err := nodes.Watch(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	if e := <-w; e.Key != "" {
		t.Fatalf("want caught-up marker first, got %q", e.Key)
	}
	if _, err := nodes.Create(ctx, "n1", &sluicev1.NodePresence{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if e := <-w; e.Key != "n1" || e.Deleted {
		t.Fatalf("want put of n1, got %+v", e)
	}
	select {
	case e := <-w:
		if e.Key != "n1" || !e.Deleted {
			t.Fatalf("want expiry of n1, got %+v", e)
		}
	case <-ctx.Done():
		t.Fatal("lease expiry never reached the watcher")
	}
}

func TestStore_NodeConfigWritesAreRepublished(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	sub, err := env.Conn.SubscribeSync(contract.NodeConfigSubject("n1"))
	if err != nil {
		t.Fatal(err)
	}
	cfgs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := cfgs.Create(ctx, contract.DesiredKey("n1"), &sluicev1.DesiredConfig{Node: "n1", Fingerprint: "abc"}); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no republished message: %v", err)
	}
	var got sluicev1.DesiredConfig
	if err := store.Unmarshal(msg.Data, &got); err != nil || got.Fingerprint != "abc" {
		t.Fatalf("republished %s (%v)", msg.Data, err)
	}
}
