package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
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

// valueEvents returns the events of type typ (events.TypeValueUnreadable,
// TypeValueRewritten) about the stored value at bucket/key, oldest first.
func valueEvents(t *testing.T, f *fleet, typ, bucket, key string) []*sluicev1.Event {
	t.Helper()
	var out []*sluicev1.Event
	for _, ev := range subjectEvents(t, f, contract.EventSubject(contract.KindQuarantine, contract.QuarantineID(bucket, key))) {
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

// rereadRefused is what the agent logs when it reads a refused desired
// config again.
const rereadRefused = "refused desired config read again"

// waitRereads waits until the agent logged msg n more times than before:
// that many reads of the same value since, each of which would have
// reported it again. It stands for a sleep, which a loaded machine can
// pass without a single resync.
func waitRereads(t *testing.T, logs *logBuffer, msg string, before, n int) {
	t.Helper()
	natstest.Eventually(t, waitFor, fmt.Sprintf("%d more reads of the same value, each logged %q and not reported again", n, msg), func() bool {
		return logs.count(msg) >= before+n
	})
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
	one := desiredConfig("n1", "one", 100)
	f.writeDesired(t, one)
	f.waitStatus(t, "n1", "provisioned", provisioned(one.Fingerprint))
	// Events are stored apart from the status: the event may trail it.
	natstest.Eventually(t, waitFor, events.TypeValueRewritten+" event", func() bool {
		return len(valueEvents(t, f, events.TypeValueRewritten, contract.BucketStatus, "n1")) > 0
	})
	evs := valueEvents(t, f, events.TypeValueRewritten, contract.BucketStatus, "n1")
	if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), contract.BucketStatus+"/n1") {
		t.Fatalf("%s events %v, want one naming %s/n1", events.TypeValueRewritten, evs, contract.BucketStatus)
	}
}

// TestAgent_StatusTurnsUnreadableWhileRunning_NextWriteOverwritesIt: the
// compare-and-set write fails on the changed key, the re-read does not
// decode, and the agent writes over it at the revision it read.
func TestAgent_StatusTurnsUnreadableWhileRunning_NextWriteOverwritesIt(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}})
	one, two := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
	f.writeDesired(t, one)
	f.waitStatus(t, "n1", "provisioned one", provisioned(one.Fingerprint))

	putRaw(t, f, contract.BucketStatus, "n1", []byte(`{"phase": 42.5}`))
	f.writeDesired(t, two)
	f.waitStatus(t, "n1", "provisioned two over the unreadable status", provisioned(two.Fingerprint))
	// Events are stored apart from the status: the event may trail it.
	natstest.Eventually(t, waitFor, events.TypeValueRewritten+" event", func() bool {
		return len(valueEvents(t, f, events.TypeValueRewritten, contract.BucketStatus, "n1")) > 0
	})
	if n := len(valueEvents(t, f, events.TypeValueRewritten, contract.BucketStatus, "n1")); n != 1 {
		t.Fatalf("%d %s events, want 1", n, events.TypeValueRewritten)
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
		{name: "zero bytes", given: []byte{}},
		{name: "a value of another type", given: []byte(`{"node": "n1", "phase": "NODE_PHASE_PROVISIONED", "fingerprint": "abc"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			rec, logs := &recorder{}, &logBuffer{}
			f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, ResyncInterval: 100 * time.Millisecond, Log: logs.logger()})
			one, two := desiredConfig("n1", "one", 100), desiredConfig("n1", "two", 200)
			f.writeDesired(t, one)
			f.waitStatus(t, "n1", "provisioned one", provisioned(one.Fingerprint))

			putRaw(t, f, contract.BucketNodeConfigs, contract.DesiredKey("n1"), tt.given)
			natstest.Eventually(t, waitFor, "ValueUnreadable event", func() bool {
				return len(valueEvents(t, f, events.TypeValueUnreadable, contract.BucketNodeConfigs, contract.DesiredKey("n1"))) > 0
			})
			waitRereads(t, logs, rereadRefused, 0, 5) // five resyncs read the same value again
			evs := valueEvents(t, f, events.TypeValueUnreadable, contract.BucketNodeConfigs, contract.DesiredKey("n1"))
			if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), contract.BucketNodeConfigs+"/n1.desired") {
				t.Fatalf("events %v, want one naming %s/n1.desired", evs, contract.BucketNodeConfigs)
			}
			if got := rec.fingerprints(); !slices.Equal(got, []string{one.Fingerprint}) {
				t.Fatalf("applied %v, want only one", got)
			}
			f.waitStatus(t, "n1", "status unchanged", provisioned(one.Fingerprint))

			f.writeDesired(t, two)
			f.waitStatus(t, "n1", "provisioned two", provisioned(two.Fingerprint))
		})
	}
}

// TestAgent_DesiredNotAsWritten_IsRefusedAndNotApplied: a desired config
// whose content was changed after it was fingerprinted, or that holds a
// field the agent does not know (a misspelt "vlan" used to decode as an
// emptier config, and wiped a node), is refused, whether it comes as the
// republished write or from the Get at start: one event naming the key,
// its revision and why, the applier never called, status and last-good
// untouched. The next config as the coordinator writes it is applied.
func TestAgent_DesiredNotAsWritten_IsRefusedAndNotApplied(t *testing.T) {
	tampered := desiredConfig("n1", "two", 200)
	tampered.Config.Intents[0].GetLayer2Network().Vlan = 4094
	tamperedJSON, err := store.Marshal(tampered)
	if err != nil {
		t.Fatal(err)
	}
	// Fingerprinted as what a decoder that drops unknown fields makes of
	// it (the network without its vlan), so only strict decoding refuses it.
	lenient := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: "tenant-two",
		Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vni: 10200}}}}}
	misspelt := []byte(`{"node": "n1", "revision": "rev-two", "rollout": "rollout-two", "fingerprint": "` + render.Fingerprint(lenient) +
		`", "config": {"intents": [{"name": "tenant-two", "layer2Network": {"vlna": 200, "vni": 10200}}]}}`)

	kinds := []struct {
		name       string
		given      []byte
		wantReason string
	}{
		{name: "content changed after fingerprinting", given: tamperedJSON,
			wantReason: "its fingerprint " + render.Short(tampered.Fingerprint) + " does not match its config (" + render.Short(render.Fingerprint(tampered.Config)) + ")"},
		{name: "unknown field", given: misspelt, wantReason: `unknown field "vlna"`},
	}
	paths := []struct {
		name    string
		atStart bool // written while the agent is stopped: found by the Get at start
	}{
		{name: "republished write", atStart: false},
		{name: "Get at start", atStart: true},
	}
	for _, kind := range kinds {
		for _, path := range paths {
			t.Run(kind.name+", "+path.name, func(t *testing.T) {
				f := newFleet(t, contract.DefaultSettings())
				dir := t.TempDir()
				rec, logs := &recorder{}, &logBuffer{}
				// While running the resync (30s) is too slow to matter: only
				// the republished write brings the value, and one Resync then
				// reads it again. At start, resyncs read it again every 100ms.
				// Neither may report it again.
				cfg := agent.Config{Node: "n1", StateDir: dir, Applier: rec, Log: logs.logger()}
				a, stop := f.run(t, cfg)
				one := desiredConfig("n1", "one", 100)
				f.writeDesired(t, one)
				f.waitStatus(t, "n1", "provisioned one", provisioned(one.Fingerprint))
				if path.atStart {
					stop()
				}
				before, err := f.statuses.Get(context.Background(), "n1")
				if err != nil {
					t.Fatal(err)
				}
				lastGood, err := os.ReadFile(filepath.Join(dir, agent.LastGoodFile))
				if err != nil {
					t.Fatal(err)
				}

				rev := putRaw(t, f, contract.BucketNodeConfigs, contract.DesiredKey("n1"), kind.given)
				if path.atStart {
					cfg.ResyncInterval = 100 * time.Millisecond
					f.start(t, cfg)
				}
				natstest.Eventually(t, waitFor, "ValueUnreadable event", func() bool {
					return len(valueEvents(t, f, events.TypeValueUnreadable, contract.BucketNodeConfigs, contract.DesiredKey("n1"))) > 0
				})
				if path.atStart {
					waitRereads(t, logs, rereadRefused, 0, 5)
				} else {
					a.Resync()
					waitRereads(t, logs, rereadRefused, 0, 1)
				}
				evs := valueEvents(t, f, events.TypeValueUnreadable, contract.BucketNodeConfigs, contract.DesiredKey("n1"))
				key := fmt.Sprintf("%s/n1.desired (revision %d)", contract.BucketNodeConfigs, rev)
				if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), key) || !strings.Contains(evs[0].GetReason(), kind.wantReason) ||
					!strings.Contains(evs[0].GetReason(), "refused: the config in force stays") {
					t.Fatalf("events %v, want one naming %s and saying %q", evs, key, kind.wantReason)
				}
				if got := rec.fingerprints(); !slices.Equal(got, []string{one.Fingerprint}) {
					t.Fatalf("applied %v, want only one", got)
				}
				after, err := f.statuses.Get(context.Background(), "n1")
				if err != nil {
					t.Fatal(err)
				}
				if after.Revision != before.Revision || !provisioned(one.Fingerprint)(after.Value) {
					t.Fatalf("status %v at revision %d, want it untouched: Provisioned one at %d", after.Value, after.Revision, before.Revision)
				}
				if b, err := os.ReadFile(filepath.Join(dir, agent.LastGoodFile)); err != nil || !bytes.Equal(b, lastGood) {
					t.Fatalf("last-good holds %s (%v), want it untouched: %s", b, err, lastGood)
				}

				three := desiredConfig("n1", "three", 300)
				f.writeDesired(t, three)
				f.waitStatus(t, "n1", "provisioned three", provisioned(three.Fingerprint))
				if got := rec.fingerprints(); !slices.Equal(got, []string{one.Fingerprint, three.Fingerprint}) {
					t.Fatalf("applied %v, want one then three", got)
				}
			})
		}
	}
}

// TestAgent_DesiredFromDeposedLeader_IsIgnoredWithAnEvent covers the
// agent's side of fencing (I6): a desired config whose leader epoch is
// lower than the highest seen is not applied, the event names both epochs,
// and a config of epoch 0 (an older coordinator) is still applied.
func TestAgent_DesiredFromDeposedLeader_IsIgnoredWithAnEvent(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	rec, logs := &recorder{}, &logBuffer{}
	f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: rec, ResyncInterval: 100 * time.Millisecond, Log: logs.logger()})
	withEpoch := func(name string, vlan uint32, epoch uint64) *sluicev1.DesiredConfig {
		d := desiredConfig("n1", name, vlan)
		d.LeaderEpoch = epoch
		return d
	}
	newLeader, oldLeader := withEpoch("new-leader", 100, 7), withEpoch("old-leader", 200, 5)
	f.writeDesired(t, newLeader)
	f.waitStatus(t, "n1", "provisioned under epoch 7", provisioned(newLeader.Fingerprint))

	f.writeDesired(t, oldLeader)
	natstest.Eventually(t, waitFor, "StaleDesiredIgnored event", func() bool {
		return len(eventsOf(t, f, "n1", agent.EventStaleDesiredIgnored)) > 0
	})
	waitRereads(t, logs, "stale desired config read again", 0, 5) // resyncs read the stale value again
	evs := eventsOf(t, f, "n1", agent.EventStaleDesiredIgnored)
	if len(evs) != 1 || !strings.Contains(evs[0].GetReason(), "leader epoch 5, lower than epoch 7") || evs[0].GetFingerprint() != oldLeader.Fingerprint {
		t.Fatalf("events %v, want one naming epochs 5 and 7 and the old leader's fingerprint", evs)
	}
	if got := rec.fingerprints(); !slices.Equal(got, []string{newLeader.Fingerprint}) {
		t.Fatalf("applied %v, want only the new leader's", got)
	}
	f.waitStatus(t, "n1", "status still the new leader's", provisioned(newLeader.Fingerprint))

	epochless := withEpoch("epochless", 300, 0)
	f.writeDesired(t, epochless)
	f.waitStatus(t, "n1", "provisioned a config of epoch 0", provisioned(epochless.Fingerprint))
	nextTerm := withEpoch("next-term", 400, 8)
	f.writeDesired(t, nextTerm)
	f.waitStatus(t, "n1", "provisioned under epoch 8", provisioned(nextTerm.Fingerprint))
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
	natstest.Eventually(t, waitFor, events.TypeValueRewritten+" event", func() bool {
		evs := valueEvents(t, f, events.TypeValueRewritten, contract.BucketNodes, "n1")
		return len(evs) == 1 && strings.Contains(evs[0].GetReason(), contract.BucketNodes+"/n1")
	})
}

// TestAgent_UnreadablePause_IsReportedOnceAndTheAgentCarriesOn: a
// control/pause that does not decode used to make every agent of the fleet
// read it again every second, with a warning each time (and its desired
// config re-read along). Now it is reported once per stored revision, the
// request in force stays, desired configs are still applied, and the next
// readable request is followed. So is a value of another type: it would
// decode as a request of generation 0, and is not well-formed for the key
// (pkg/contract/wellformed).
func TestAgent_UnreadablePause_IsReportedOnceAndTheAgentCarriesOn(t *testing.T) {
	tests := []struct {
		name      string
		given     []byte
		wantEvent bool
	}{
		{name: "not json", given: []byte("{not json"), wantEvent: true},
		{name: "zero bytes", given: []byte{}, wantEvent: true},
		{name: "a value of another type", given: []byte(`{"node": "n1", "phase": "NODE_PHASE_PROVISIONED"}`), wantEvent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			rev := putRaw(t, f, contract.BucketControl, contract.KeyPause, tt.given)
			var logs logBuffer
			f.start(t, agent.Config{Node: "n1", StateDir: t.TempDir(), Applier: &recorder{}, ResyncInterval: 100 * time.Millisecond, Log: logs.logger()})
			one := desiredConfig("n1", "one", 100)
			f.writeDesired(t, one)
			f.waitStatus(t, "n1", "provisioned one", provisioned(one.Fingerprint))
			// Five resyncs read the same value again: each reads the pause,
			// then the desired config, which is logged as already handled.
			waitRereads(t, &logs, "already handled", logs.count("already handled"), 5)

			evs := valueEvents(t, f, events.TypeValueUnreadable, contract.BucketControl, contract.KeyPause)
			switch {
			case !tt.wantEvent && len(evs) != 0:
				t.Fatalf("events %v, want none", evs)
			case tt.wantEvent && (len(evs) != 1 || !strings.Contains(evs[0].GetReason(), fmt.Sprintf("%s/%s (revision %d) is unreadable", contract.BucketControl, contract.KeyPause, rev))):
				t.Fatalf("events %v, want one naming %s/%s and its revision %d", evs, contract.BucketControl, contract.KeyPause, rev)
			}
			if n := logs.count("retrying shortly"); n != 0 {
				t.Errorf("%d reads retried within a second, want none: the same bytes would be read again", n)
			}
			if n, want := logs.count(`"message":"ValueUnreadable"`), len(evs); n != want {
				t.Errorf("%d warnings, want %d", n, want)
			}

			b, err := store.Marshal(&sluicev1.PauseRequest{Paused: true, Generation: 1, Reason: "test"})
			if err != nil {
				t.Fatal(err)
			}
			putRaw(t, f, contract.BucketControl, contract.KeyPause, b)
			natstest.Eventually(t, waitFor, "the presence to acknowledge pause generation 1", func() bool {
				p, err := f.nodes.Get(context.Background(), "n1")
				return err == nil && p.Value.GetPause().GetGeneration() == 1 && p.Value.GetPause().GetPaused()
			})
		})
	}
}
