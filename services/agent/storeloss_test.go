package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/agent"
)

// A store lost while the node keeps its state dir: the restarted agent
// applies nothing, and its presence says what the node runs (from its
// last-good), since the status that said it is gone with the store.
func TestAgent_LostStore_PresenceCarriesTheConfigInForce(t *testing.T) {
	dir := t.TempDir()
	one := desiredConfig("n1", "one", 100)

	before := newFleet(t, contract.DefaultSettings())
	before.writeDesired(t, one)
	stop := before.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: &recorder{}})
	before.waitStatus(t, "n1", "Provisioned before the store is lost", provisioned(one.Fingerprint))
	stop()

	// Another server, another store dir: everything the first held is gone.
	after := newFleet(t, contract.DefaultSettings())
	second := &recorder{}
	after.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: second})
	var got string
	natstest.Eventually(t, waitFor, "presence naming the config in force", func() bool {
		e, err := after.nodes.Get(context.Background(), "n1")
		if err != nil {
			return false
		}
		p := e.Value
		got = p.GetInForceRevision() + " " + p.GetInForceRollout() + " " + p.GetInForceFingerprint()
		return p.GetInForceRevision() == one.Revision && p.GetInForceFingerprint() == one.Fingerprint && p.GetInForceRollout() == one.Rollout
	})
	if n := second.count(); n != 0 {
		t.Fatalf("agent applied %d configs after the store was lost, want 0 (presence: %s)", n, got)
	}
	// The status is the agent's report about a desired config; with none
	// written since the loss there is nothing to report on.
	if _, err := after.statuses.Get(context.Background(), "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("status after the loss: %v, want none", err)
	}
}

// A node that never applied anything says so: its presence names no config.
func TestAgent_NoLastGood_PresenceNamesNoConfig(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})
	natstest.Eventually(t, waitFor, "presence", func() bool {
		_, err := f.nodes.Get(context.Background(), "n1")
		return err == nil
	})
	e, _ := f.nodes.Get(context.Background(), "n1")
	if p := e.Value; p.GetInForceRevision() != "" || p.GetInForceFingerprint() != "" {
		t.Fatalf("presence of a node with no last-good names %q/%q, want nothing", p.GetInForceRevision(), p.GetInForceFingerprint())
	}
}
