package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// eventsOf returns node's events of type typ, oldest first.
func eventsOf(t *testing.T, f *fleet, node, typ string) []*sluicev1.Event {
	t.Helper()
	var out []*sluicev1.Event
	for _, ev := range nodeEvents(t, f, node) {
		if ev.GetType() == typ {
			out = append(out, ev)
		}
	}
	return out
}

// putRaw stores b at key in the bucket with compare-and-set, as a broken
// writer or a hand edit would, and returns the new revision.
func putRaw(t *testing.T, f *fleet, bucket, key string, b []byte) uint64 {
	t.Helper()
	ctx := context.Background()
	kv, err := f.env.JS.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	var rev uint64
	if cur, err := kv.Get(ctx, key); err == nil {
		rev, err = kv.Update(ctx, key, b, cur.Revision())
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	if rev, err = kv.Create(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestAgent_UnreadableOwnStatusAtStart_IsOverwrittenAtOnce covers issue 9
// item 12: a status key holding garbage used to stop the agent from ever
// writing its status again. It is overwritten at start, before any desired
// config arrives, and the node then reports as usual.
func TestAgent_UnreadableOwnStatusAtStart_IsOverwrittenAtOnce(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	putRaw(t, f, contract.BucketStatus, "n1", []byte("garbage{"))
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})

	f.waitStatus(t, "n1", "a readable status", func(s *sluicev1.NodeStatus) bool {
		return s.GetNode() == "n1" && strings.Contains(s.GetMessage(), "found unreadable")
	})
	f.writeDesired(t, desiredConfig("n1", "fp-one", 100))
	f.waitStatus(t, "n1", "provisioned", provisioned("fp-one"))
	evs := eventsOf(t, f, "n1", agent.EventUnreadableStatusRewritten)
	if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), contract.BucketStatus+"/n1") {
		t.Fatalf("%s events %v, want one naming %s/n1", agent.EventUnreadableStatusRewritten, evs, contract.BucketStatus)
	}
}

// TestAgent_StatusTurnsUnreadableWhileRunning_NextWriteOverwritesIt: the
// compare-and-set write fails on the changed key, the re-read does not
// decode, and the agent writes over it at the revision it read.
func TestAgent_StatusTurnsUnreadableWhileRunning_NextWriteOverwritesIt(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})
	f.writeDesired(t, desiredConfig("n1", "fp-one", 100))
	f.waitStatus(t, "n1", "provisioned fp-one", provisioned("fp-one"))

	putRaw(t, f, contract.BucketStatus, "n1", []byte(`{"phase": 42.5}`))
	f.writeDesired(t, desiredConfig("n1", "fp-two", 200))
	f.waitStatus(t, "n1", "provisioned fp-two over the unreadable status", provisioned("fp-two"))
	if n := len(eventsOf(t, f, "n1", agent.EventUnreadableStatusRewritten)); n != 1 {
		t.Fatalf("%d %s events, want 1", n, agent.EventUnreadableStatusRewritten)
	}
}

// TestAgent_UnreadableDesired_KeepsTheConfigInForce: a desired config that
// does not decode, or has no fingerprint, is never applied (in particular
// not as an empty config); each is reported once although every resync
// reads it again, and the next readable config is applied.
func TestAgent_UnreadableDesired_KeepsTheConfigInForce(t *testing.T) {
	tests := []struct {
		name  string
		given []byte
	}{
		{name: "not json", given: []byte("garbage{")},
		{name: "wrong field type", given: []byte(`{"node": 7}`)},
		{name: "no fingerprint", given: []byte(`{"node": "n1", "revision": "r"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			rec := &recorder{}
			f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, ResyncInterval: 100 * time.Millisecond})
			f.writeDesired(t, desiredConfig("n1", "fp-one", 100))
			f.waitStatus(t, "n1", "provisioned fp-one", provisioned("fp-one"))

			putRaw(t, f, contract.BucketNodeConfigs, contract.DesiredKey("n1"), tt.given)
			natstest.Eventually(t, waitFor, "UnreadableDesiredIgnored event", func() bool {
				return len(eventsOf(t, f, "n1", agent.EventUnreadableDesiredIgnored)) > 0
			})
			time.Sleep(500 * time.Millisecond) // five resyncs read the same value again
			evs := eventsOf(t, f, "n1", agent.EventUnreadableDesiredIgnored)
			if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), contract.BucketNodeConfigs+"/n1.desired") {
				t.Fatalf("events %v, want one naming %s/n1.desired", evs, contract.BucketNodeConfigs)
			}
			if got := rec.fingerprints(); !slices.Equal(got, []string{"fp-one"}) {
				t.Fatalf("applied %v, want only fp-one", got)
			}
			f.waitStatus(t, "n1", "status unchanged", provisioned("fp-one"))

			f.writeDesired(t, desiredConfig("n1", "fp-two", 200))
			f.waitStatus(t, "n1", "provisioned fp-two", provisioned("fp-two"))
		})
	}
}

// TestAgent_DesiredFromDeposedLeader_IsIgnoredWithAnEvent covers the
// agent's side of fencing (I6): a desired config whose leader epoch is
// lower than the highest seen is not applied, the event names both epochs,
// and a config of epoch 0 (an older coordinator) is still applied.
func TestAgent_DesiredFromDeposedLeader_IsIgnoredWithAnEvent(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	rec := &recorder{}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, ResyncInterval: 100 * time.Millisecond})
	withEpoch := func(fp string, vlan uint32, epoch uint64) *sluicev1.DesiredConfig {
		d := desiredConfig("n1", fp, vlan)
		d.LeaderEpoch = epoch
		return d
	}
	f.writeDesired(t, withEpoch("fp-new-leader", 100, 7))
	f.waitStatus(t, "n1", "provisioned under epoch 7", provisioned("fp-new-leader"))

	f.writeDesired(t, withEpoch("fp-old-leader", 200, 5))
	natstest.Eventually(t, waitFor, "StaleDesiredIgnored event", func() bool {
		return len(eventsOf(t, f, "n1", agent.EventStaleDesiredIgnored)) > 0
	})
	time.Sleep(500 * time.Millisecond) // resyncs read the stale value again
	evs := eventsOf(t, f, "n1", agent.EventStaleDesiredIgnored)
	if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), "leader epoch 5, lower than epoch 7") || evs[0].GetFingerprint() != "fp-old-leader" {
		t.Fatalf("events %v, want one naming epochs 5 and 7 and fp-old-leader", evs)
	}
	if got := rec.fingerprints(); !slices.Equal(got, []string{"fp-new-leader"}) {
		t.Fatalf("applied %v, want only fp-new-leader", got)
	}
	f.waitStatus(t, "n1", "status still the new leader's", provisioned("fp-new-leader"))

	f.writeDesired(t, withEpoch("fp-epochless", 300, 0))
	f.waitStatus(t, "n1", "provisioned a config of epoch 0", provisioned("fp-epochless"))
	f.writeDesired(t, withEpoch("fp-next-term", 400, 8))
	f.waitStatus(t, "n1", "provisioned under epoch 8", provisioned("fp-next-term"))
}

// TestAgent_UnreadableOwnPresence_IsOverwritten: the presence key is the
// agent's own too; garbage in it must not keep the node unregistered.
func TestAgent_UnreadableOwnPresence_IsOverwritten(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	putRaw(t, f, contract.BucketNodes, "n1", []byte("garbage{"))
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})
	natstest.Eventually(t, waitFor, "a readable presence", func() bool {
		e, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetNode() == "n1"
	})
	natstest.Eventually(t, waitFor, agent.EventUnreadablePresenceRewritten+" event", func() bool {
		evs := eventsOf(t, f, "n1", agent.EventUnreadablePresenceRewritten)
		return len(evs) == 1 && strings.Contains(evs[0].GetReason(), contract.BucketNodes+"/n1")
	})
}
