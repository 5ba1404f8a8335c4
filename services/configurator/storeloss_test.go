package configurator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// presentRunning writes node's presence as its agent does after a store
// loss: it names the config the node runs, from its last-good.
func presentRunning(t *testing.T, env *natstest.Env, node, revision string) {
	t.Helper()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if _, err := nodes.Create(context.Background(), node, &sluicev1.NodePresence{Node: node, InForceRevision: revision,
		InForceFingerprint: "fp-" + node, HeartbeatAt: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
}

// I10: an empty store while nodes run configs cuts no revision. The apply
// (here a partial set, one intent) would otherwise become the whole config
// of every node.
func TestApply_StoreLostWhileNodesRunConfigs_RefusedUntilConfirmed(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	presentRunning(t, env, "node-01", "110b0b1c2d3e4f5a")
	presentRunning(t, env, "node-02", "110b0b1c2d3e4f5a")
	evs := watchEvents(t, env.Conn)
	start(t, env)
	one := examples(t)[:1]

	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: one})
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeStoreLost {
		t.Fatalf("apply on a lost store: %v, want error code %s", err, contract.ErrCodeStoreLost)
	}
	for _, want := range []string{"the store is empty but 2 nodes run configs of revision 110b0b1c2d3e", "nothing was stored", "sluice recover --confirm-empty"} {
		if !strings.Contains(ae.Description, want) {
			t.Errorf("refusal %q does not say %q", ae.Description, want)
		}
	}
	if _, err := del(t, env.Conn, "RoutingTable", "mgmt"); !errors.As(err, &ae) || ae.Code != contract.ErrCodeStoreLost {
		t.Errorf("delete on a lost store: %v, want error code %s", err, contract.ErrCodeStoreLost)
	}
	if snap := takeSnapshot(t, env); len(snap.intents) != 0 || len(snap.revisions) != 0 {
		t.Fatalf("refused applies stored intents %v, revisions %v; want nothing", snap.intents, snap.revisions)
	}
	// Said once, not once per refusal.
	natstest.Eventually(t, wait, "a StoreLost event", func() bool { return len(evs.ofType(contract.EventStoreLost)) > 0 })
	if n := len(evs.ofType(contract.EventStoreLost)); n != 1 {
		t.Errorf("%d StoreLost events, want 1", n)
	}

	// The operator's way out: an empty store is what they want.
	control := store.New(env.Buckets.Control, func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} })
	if _, err := control.Create(context.Background(), contract.KeyStoreConfirm, &sluicev1.StoreConfirm{By: "ops", At: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	if resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: one}); resp.GetRevision() == "" {
		t.Fatalf("apply after the confirmation cut no revision: %v", resp)
	}
}

// A first install: nodes that run nothing yet are no evidence of a loss.
func TestApply_EmptyStoreNodesRunNothing_Accepted(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	presentRunning(t, env, "node-01", "")
	start(t, env)
	if resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)[:1]}); resp.GetRevision() == "" {
		t.Fatalf("first apply cut no revision: %v", resp)
	}
}

// The loss is said when it shows, not only when an apply is refused: the
// agents' presence arrives a beat after the wipe, after the configurator
// started.
func TestConfigurator_StoreBecomesLost_SaysSoOnce(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	start(t, env, func(c *configurator.Config) { c.LossCheck = 50 * time.Millisecond })
	presentRunning(t, env, "node-01", "110b0b1c2d3e4f5a")
	natstest.Eventually(t, wait, "a StoreLost event", func() bool { return len(evs.ofType(contract.EventStoreLost)) > 0 })
	time.Sleep(300 * time.Millisecond) // six more checks: none may say it again
	if n := len(evs.ofType(contract.EventStoreLost)); n != 1 {
		t.Errorf("%d StoreLost events, want 1", n)
	}
	if r := evs.ofType(contract.EventStoreLost)[0].GetReason(); !strings.Contains(r, "the store is empty but 1 node runs configs of revision 110b0b1c2d3e") {
		t.Errorf("StoreLost reason %q", r)
	}
}
