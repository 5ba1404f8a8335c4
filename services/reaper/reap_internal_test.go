package reaper

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
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
	if err := r.reap(ctx, h, "n1", active{}); err != nil {
		t.Fatal(err)
	}
	if _, err := statuses.Get(ctx, "n1"); err != nil {
		t.Fatalf("status of a live node: %v, want kept", err)
	}
	if _, ok := r.absent["n1"]; ok {
		t.Fatal("absence timer of a live node kept; want cleared")
	}
}

// TestDeleteKeys_KeyChangedSinceRead_IsKeptWithoutAnError: a lost CAS race
// (ErrConflict, also error 10164 on a cluster) means the key's writer is
// alive: the key is kept, the timer keeps running, and it is not an error.
func TestDeleteKeys_KeyChangedSinceRead_IsKeptWithoutAnError(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := New(Config{Conn: env.Conn, Settings: env.Settings, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	if _, err := configs.Create(ctx, contract.DesiredKey("n1"), formed(&sluicev1.DesiredConfig{Node: "n1", Fingerprint: "fp"})); err != nil {
		t.Fatal(err)
	}
	rev, err := statuses.Create(ctx, "n1", &sluicev1.NodeStatus{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.absent["n1"] = now.Add(-time.Hour)
	h, err := r.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, _, err := r.readKeys(ctx, h, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := statuses.Update(ctx, "n1", &sluicev1.NodeStatus{Node: "n1", Message: "back"}, rev); err != nil {
		t.Fatal(err)
	}
	if err := r.deleteKeys(ctx, h, "n1", keys); err != nil {
		t.Fatalf("deleteKeys = %v, want nil on a conflict", err)
	}
	if _, err := configs.Get(ctx, contract.DesiredKey("n1")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("desired: %v, want deleted", err)
	}
	if e, err := statuses.Get(ctx, "n1"); err != nil || e.Value.GetMessage() != "back" {
		t.Errorf("status: %v %v, want the rewritten one kept", e.Value, err)
	}
	if _, ok := r.absent["n1"]; !ok {
		t.Error("absence timer cleared; want it kept so the next pass looks again")
	}
}

// formed gives d, a test's desired config, a config its fingerprint is
// the fingerprint of, as the store requires (pkg/contract/wellformed): the
// config is named after the test's fingerprint tag.
func formed(d *sluicev1.DesiredConfig) *sluicev1.DesiredConfig {
	d.Config = &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: d.GetFingerprint()}}}
	d.Fingerprint = render.Fingerprint(d.Config)
	return d
}
