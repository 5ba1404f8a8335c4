package configurator_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// intentListings counts the listings of the intents bucket: each is a
// watcher, which creates a consumer on the bucket's stream (the JetStream
// API request is seen by any subscriber of its subject).
func intentListings(t *testing.T, env *natstest.Env) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	stream := "KV_" + contract.BucketIntents
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.CREATE." + stream + ".>"} {
		sub, err := env.Conn.Subscribe(subj, func(*nats.Msg) { n.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestConfigurator_EachChangeReadsTheStoredIntentsOnce: an apply, a
// delete and an undo each list the intents bucket once: what the change is
// planned from is read once and passed down to the commit (the head is
// moved from the set as the journal leaves it, pkg/change.Landed).
func TestConfigurator_EachChangeReadsTheStoredIntentsOnce(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ctx := context.Background()
	listings := intentListings(t, env)
	once := func(what string, do func() error) {
		t.Helper()
		if err := env.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		before := listings.Load()
		if err := do(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := env.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := listings.Load() - before; got != 1 {
			t.Errorf("%s listed the intents bucket %d times; want once", what, got)
		}
	}
	ins := examples(t)
	var first *sluicev1.ApplyResponse
	once("an apply", func() (err error) {
		first, err = apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
		return err
	})
	once("an apply that changes nothing", func() error {
		_, err := apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
		return err
	})
	victim := ins[0]
	kind := intent.Kind(victim)
	once("a delete", func() error {
		_, err := apiclient.Delete(ctx, env.Conn, &sluicev1.DeleteRequest{Kind: kind, Name: victim.GetName()})
		return err
	})
	once("an undo", func() error {
		_, err := apiclient.Undo(ctx, env.Conn, &sluicev1.UndoRequest{ToRevision: first.GetRevision()})
		return err
	})
}

// TestConfigurator_ARegistrySyncReadsTheStoredIntentsOnce: a sync of a
// registry lists the intents bucket once, whether it changes something or
// not (before: once to plan, once more to count what the registry owns for
// its status, and once more to cut the revision when it changed
// something). Each sync writes the registry's status once: over a window
// the listings are at most the syncs, give or take the window's edges.
func TestConfigurator_ARegistrySyncReadsTheStoredIntentsOnce(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	dir := t.TempDir()
	writeNet(t, dir, "red", 100)
	start(t, env)
	addRegistry(t, env, dirSpec("gitops", dir))
	waitStored(t, env, "layer2network.red", "red synced from the directory", func(v *sluicev1.StoredIntent) bool { return v != nil })
	waitSyncs(t, env, "gitops", 1)

	var syncs atomic.Int64
	sub, err := env.Conn.Subscribe("$KV."+contract.BucketRegistries+".gitops", func(*nats.Msg) { syncs.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	listings := intentListings(t, env)
	waitSyncs(t, env, "gitops", 3)        // three that change nothing
	for vlan := 110; vlan < 113; vlan++ { // three that each change something
		writeNet(t, dir, "red", vlan)
		waitStored(t, env, "layer2network.red", "red's new VLAN", func(v *sluicev1.StoredIntent) bool {
			return v.GetIntent().GetLayer2Network().GetVlan() == uint32(vlan)
		})
		waitSyncs(t, env, "gitops", 1)
	}
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	l, s := listings.Load(), syncs.Load()
	if s < 6 || l > s+2 {
		t.Errorf("%d syncs listed the intents bucket %d times; want once each (two more at most, at the window's edges)", s, l)
	}
}
