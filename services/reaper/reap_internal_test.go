package reaper

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestReap_PresenceBackAfterListing_KeepsKeys covers the last check: a node
// whose presence appears after the pass listed it absent, with a timer long
// past grace, keeps its keys.
func TestReap_PresenceBackAfterListing_KeepsKeys(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := New(Config{Conn: env.Conn, Settings: env.Settings, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if _, err := statuses.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if _, err := nodes.Create(ctx, "n1", &sluicev1.NodePresence{Node: "n1"}); err != nil {
		t.Fatal(err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.absent["n1"] = now.Add(-time.Hour) // a stale timer
	h, err := r.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.reap(ctx, h, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := statuses.Get(ctx, "n1"); err != nil {
		t.Fatalf("status of a live node: %v, want kept", err)
	}
	if _, ok := r.absent["n1"]; ok {
		t.Fatal("absence timer of a live node kept; want cleared")
	}
}
