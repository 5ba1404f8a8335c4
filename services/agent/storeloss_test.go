package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
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

// storeID reads control/store.id.
func storeID(t *testing.T, f *fleet) string {
	t.Helper()
	e, err := store.New(f.env.Buckets.Control, func() *sluicev1.StoreID { return &sluicev1.StoreID{} }).Get(context.Background(), contract.KeyStoreID)
	if err != nil {
		t.Fatalf("read control/%s: %v", contract.KeyStoreID, err)
	}
	return e.Value.GetId()
}

// replaceStore does to the store what a lost JetStream directory does while
// the agent keeps running: the nodeconfigs and control buckets are deleted
// and created again by their manager (buckets.Ensure), so the nodeconfigs
// revisions count from 1 again and the store has another identity.
func replaceStore(t *testing.T, f *fleet) {
	t.Helper()
	ctx := context.Background()
	for _, b := range []string{contract.BucketNodeConfigs, contract.BucketControl} {
		if err := f.env.JS.DeleteKeyValue(ctx, b); err != nil {
			t.Fatalf("delete bucket %s: %v", b, err)
		}
	}
	if err := buckets.Ensure(ctx, f.env.JS, f.env.Settings); err != nil {
		t.Fatalf("create the buckets again: %v", err)
	}
}

// An agent that kept running through a store loss takes the new store's
// desired configs, whose leader epochs (the lease's revisions) and
// nodeconfigs revisions count from 1 again, once control/store.id says the
// store was replaced; within one store a lower epoch is still a deposed
// leader's and refused. On the code before control/store.id the new
// store's configs were ignored as stale until the agent restarted.
func TestAgent_StoreReplaced_NewStoresConfigsAreTaken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		epoch uint64 // of the new store's first config; the old store's is 5
	}{
		{"lower leader epoch", 1},
		{"higher epoch, lower nodeconfigs revision", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			rec := &recorder{}
			f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, ResyncInterval: 100 * time.Millisecond})
			withEpoch := func(name string, vlan uint32, epoch uint64) *sluicev1.DesiredConfig {
				d := desiredConfig("n1", name, vlan)
				d.LeaderEpoch = epoch
				return d
			}
			// The old store: epoch 5, and revisions well above what the
			// new store's first writes get.
			for i := range 5 {
				f.writeDesired(t, desiredConfig("n2", fmt.Sprint("filler-", i), uint32(500+i)))
			}
			old := withEpoch("old-store", 100, 5)
			f.writeDesired(t, old)
			f.waitStatus(t, "n1", "provisioned the old store's config", provisioned(old.Fingerprint))
			was := storeID(t, f)

			replaceStore(t, f)
			now := storeID(t, f)
			if now == "" || now == was {
				t.Fatalf("store id after the replacement %q, before %q: want a new one", now, was)
			}
			fresh := withEpoch("new-store", 200, tc.epoch)
			f.writeDesired(t, fresh) // nodeconfigs revision 1
			f.waitStatus(t, "n1", "provisioned the new store's first config", provisioned(fresh.Fingerprint))
			evs := eventsOf(t, f, "n1", agent.EventNodeStoreReplaced)
			if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), was) || !strings.Contains(evs[0].GetReason(), now) ||
				evs[0].GetFingerprint() != fresh.Fingerprint {
				t.Fatalf("events %v, want one NodeStoreReplaced naming both store ids (%s, %s) and the new config", evs, was, now)
			}

			// Within the new store the deposed-leader fence holds.
			next := withEpoch("next-term", 300, tc.epoch+3)
			f.writeDesired(t, next)
			f.waitStatus(t, "n1", "provisioned the new store's next term", provisioned(next.Fingerprint))
			deposed := withEpoch("deposed", 400, tc.epoch+1)
			f.writeDesired(t, deposed)
			natstest.Eventually(t, waitFor, "StaleDesiredIgnored in the new store", func() bool {
				return len(eventsOf(t, f, "n1", agent.EventStaleDesiredIgnored)) > 0
			})
			if got := rec.fingerprints(); !slices.Equal(got, []string{old.Fingerprint, fresh.Fingerprint, next.Fingerprint}) {
				t.Fatalf("applied %v, want the old store's, the new store's first and its next term's, not the deposed leader's", got)
			}
			if n := len(eventsOf(t, f, "n1", agent.EventNodeStoreReplaced)); n != 1 {
				t.Fatalf("%d NodeStoreReplaced events, want 1: the store was replaced once", n)
			}
		})
	}
}

// writePause stores r as control/pause.
func writePause(t *testing.T, f *fleet, r *sluicev1.PauseRequest) {
	t.Helper()
	b, err := store.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, f, contract.BucketControl, contract.KeyPause, b)
}

// An agent that kept running through a store loss follows the new store's
// pause, whose generations count from 1 again: a pause of generation 1 holds
// it although it saw generation 3 of the old store, its acknowledgement
// counts in the new store's generations, and the resume that follows
// starts what was held. A new store that was never paused does not leave it
// held by the old store's pause. On the code before, the new store's pause
// was ignored (generation 1 ≤ 3), and an agent paused at the loss stayed
// held.
func TestAgent_StoreReplaced_NewStoresPauseIsFollowed(t *testing.T) {
	ack := func(t *testing.T, f *fleet) *sluicev1.PauseAck {
		e, err := f.nodes.Get(context.Background(), "n1")
		if err != nil {
			return nil
		}
		return e.Value.GetPause()
	}
	for _, tc := range []struct {
		name      string
		oldPaused bool // the old store's last request, generation 3
	}{
		{"the old store's last request resumed", false},
		{"the old store was paused at the loss", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			rec := &recorder{}
			f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, ResyncInterval: 100 * time.Millisecond})
			first := desiredConfig("n1", "first", 100)
			f.writeDesired(t, first)
			f.waitStatus(t, "n1", "provisioned before the pauses", provisioned(first.Fingerprint))
			for gen := uint64(1); gen <= 3; gen++ {
				writePause(t, f, &sluicev1.PauseRequest{Paused: gen < 3 || tc.oldPaused, Generation: gen, By: "old"})
			}
			natstest.Eventually(t, waitFor, "the old store's generation 3 acknowledged", func() bool {
				a := ack(t, f)
				return a.GetGeneration() == 3 && a.GetPaused() == tc.oldPaused
			})
			was := storeID(t, f)
			replaceStore(t, f)
			if now := storeID(t, f); now == "" || now == was {
				t.Fatalf("store id after the replacement %q, before %q: want a new one", now, was)
			}

			if tc.oldPaused {
				// The new store holds no pause: the old store's does not hold the node.
				second := desiredConfig("n1", "second", 200)
				f.writeDesired(t, second)
				f.waitStatus(t, "n1", "provisioned on a new store that was never paused", provisioned(second.Fingerprint))
				return
			}
			writePause(t, f, &sluicev1.PauseRequest{Paused: true, Generation: 1, By: "new"})
			natstest.Eventually(t, waitFor, "the new store's pause (generation 1) acknowledged", func() bool {
				a := ack(t, f)
				return a.GetGeneration() == 1 && a.GetPaused()
			})
			held := desiredConfig("n1", "held", 300)
			f.writeDesired(t, held)
			time.Sleep(300 * time.Millisecond) // three resyncs: a held agent starts nothing
			if got := rec.fingerprints(); !slices.Equal(got, []string{first.Fingerprint}) {
				t.Fatalf("applied %v while the new store's pause holds, want only the first config", got)
			}
			writePause(t, f, &sluicev1.PauseRequest{Paused: false, Generation: 2, By: "new"})
			f.waitStatus(t, "n1", "provisioned once the new store resumed", provisioned(held.Fingerprint))
			evs := eventsOf(t, f, "n1", agent.EventNodeStoreReplaced)
			if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), was) || !strings.Contains(evs[0].GetReason(), "pause") {
				t.Fatalf("events %v, want one NodeStoreReplaced naming the old store id %s and the pause", evs, was)
			}
		})
	}
}
