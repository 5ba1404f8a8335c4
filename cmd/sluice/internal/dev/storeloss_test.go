package dev

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// A data directory whose agents have state is never seeded with the
// examples, although its store is empty: the store was lost under them.
// (cmd/sluice/internal/cli's TestDisasterRecovery_… runs the whole story.)
func TestDev_AgentsHaveState_EmptyStore_ExamplesNotApplied(t *testing.T) {
	data, exDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(examples), 0o644); err != nil {
		t.Fatal(err)
	}
	nc := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: "kept",
		Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 7}}}}}
	const rev = "110b0b1c2d3e4f5a6b7c"
	lastGood, err := store.Marshal(&sluicev1.DesiredConfig{Node: "node-01", Revision: rev, Rollout: "2-110b0b1c2d3e",
		Fingerprint: render.Fingerprint(nc), Config: nc})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(data, "agents", "node-01")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, agent.LastGoodFile), lastGood, 0o644); err != nil {
		t.Fatal(err)
	}

	s := start(t, Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 2, Examples: exDir, Stderr: io.Discard})
	const situation = "the store is empty but 1 node runs configs of revision 110b0b1c2d3e"
	if seed := s.Seeded(); seed.Intents != 0 || !strings.Contains(seed.Held, "1 agent has state") || !strings.Contains(seed.Held, situation) {
		t.Errorf("seeded %+v, want the examples held, naming the agent's state and %q", seed, situation)
	}
	if s.Loss().String() != situation {
		t.Errorf("loss %q, want %q", s.Loss(), situation)
	}
	c := connect(t, s)
	if _, err := store.New(c.b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("head: %v, want none", err)
	}
	if n := len(c.intents(t)); n != 0 {
		t.Errorf("%d intents stored, want none", n)
	}
}
