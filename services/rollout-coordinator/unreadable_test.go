package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// garbage is what a broken writer, a hand edit or another program leaves
// in a key: bytes that are not JSON, nothing at all, and a value of another
// type, which decodes (unknown fields are dropped) as an empty value.
var garbage = []struct{ name, value string }{
	{"not json", "{not json"},
	{"zero bytes", ""},
	{"a value of another type", `{"node":"n1","phase":"NODE_PHASE_PROVISIONED","fingerprint":"abc"}`},
}

// A corrupt or foreign value in a key the coordinator reads is skipped and
// reported with a ValueUnreadable event naming it; the term goes on (no
// second LeadershipAcquired: a term that ended on it would end again on
// every start) and the next head is rolled out. Before, a head naming an
// unreadable revision ended the term at every start, a foreign revision was
// rolled out as an empty config, and a foreign head or rollouts/active ended
// the term at every start.
func TestCoordinator_CorruptOrForeignValue_IsSkippedWithAnEventAndTheNextHeadRollsOut(t *testing.T) {
	for _, g := range garbage {
		t.Run(g.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			startFleet(t, env, 10*time.Millisecond, nil, "n1", "n2")
			evs := watchEvents(t, env)
			stop := startCoordinator(t, env, "c1")
			a := moveHead(t, env, 1, "2", table("a", 100))
			waitRollout(t, env, "1-"+render.Short(a.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)

			// The head moves to a revision whose value is garbage.
			b := render.RevisionID([]*sluicev1.Intent{table("b", 101)})
			put(t, env.Buckets.Revisions, b, g.value)
			putHead(t, env, &sluicev1.Head{Revision: b, Generation: 2})
			evs.wait(t, "ValueUnreadable", contract.BucketRevisions+"/"+b)
			// The head itself is garbage.
			put(t, env.Buckets.Revisions, contract.KeyHead, g.value)
			evs.wait(t, "ValueUnreadable", contract.BucketRevisions+"/"+contract.KeyHead)

			// At the next start, the rollout pointers are garbage too.
			stop()
			put(t, env.Buckets.Rollouts, contract.KeyActive, g.value)
			put(t, env.Buckets.Rollouts, contract.KeyLastApplied, g.value)
			startCoordinator(t, env, "c2")
			evs.wait(t, "ValueUnreadable", contract.BucketRollouts+"/"+contract.KeyActive)
			evs.wait(t, "ValueUnreadable", contract.BucketRollouts+"/"+contract.KeyLastApplied)

			c := &sluicev1.Revision{Id: render.RevisionID([]*sluicev1.Intent{table("c", 102)}), Intents: []*sluicev1.Intent{table("c", 102)}}
			cb, err := store.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			put(t, env.Buckets.Revisions, c.Id, string(cb))
			putHead(t, env, &sluicev1.Head{Revision: c.Id, Generation: 3, Strategy: &sluicev1.Strategy{MaxParallel: "2"}})
			waitRollout(t, env, "3-"+render.Short(c.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
			if n := evs.count("LeadershipAcquired", ""); n != 2 {
				t.Errorf("%d LeadershipAcquired events, want 2 (one per coordinator): a term ended on a bad value", n)
			}
			if n := evs.count("RolloutStarted", contract.RolloutID(2, b)); n != 0 {
				t.Errorf("the head naming revision %s (garbage) was rolled out", render.Short(b))
			}
		})
	}
}

// put stores value at key as a broken writer would, unchecked.
func put(t *testing.T, kv interface {
	Put(context.Context, string, []byte) (uint64, error)
}, key, value string) {
	t.Helper()
	if _, err := kv.Put(context.Background(), key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

// putHead overwrites the head, whatever it holds.
func putHead(t *testing.T, env *natstest.Env, h *sluicev1.Head) {
	t.Helper()
	h.UpdatedAt = timestamppb.Now()
	b, err := store.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	put(t, env.Buckets.Revisions, contract.KeyHead, string(b))
}

// events records the events published.
type events struct {
	mu  sync.Mutex
	all []*sluicev1.Event
}

func watchEvents(t *testing.T, env *natstest.Env) *events {
	t.Helper()
	e := &events{}
	sub, err := env.Conn.Subscribe(contract.EventsSubjectPrefix+".>", func(m *nats.Msg) {
		ev := &sluicev1.Event{}
		if store.Unmarshal(m.Data, ev) == nil {
			e.mu.Lock()
			e.all = append(e.all, ev)
			e.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

// count counts the events of type typ whose reason or rollout contains has.
func (e *events) count(typ, has string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.all {
		if ev.GetType() == typ && (strings.Contains(ev.GetReason(), has) || strings.Contains(ev.GetRollout(), has)) {
			n++
		}
	}
	return n
}

// wait waits for an event of type typ whose reason names key (bucket/key).
func (e *events) wait(t *testing.T, typ, key string) {
	t.Helper()
	// margin: the poll ends as soon as the event arrives.
	natstest.Eventually(t, 30*time.Second, typ+" naming "+key, func() bool { return e.count(typ, key+" ") > 0 })
}

// A value of another type in a node's backup key (here a fence, which
// decodes as an empty DesiredConfig) is not taken as the node's backup by
// the next term: it is reported with a ValueUnreadable event naming the
// key, and when the rollout fails the node is reverted to the last applied
// revision's config, as a node without a backup is, so the rollout ends
// RolledBack at once. Before, the revert wrote a desired config with no
// fingerprint and no config, which the agent refuses: the rollout hung in
// Reverting until its revert deadline (10 minutes).
func TestCoordinator_ForeignBackup_IsNoBackupAndTheRevertEnds(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	fleet := startFleet(t, env, 10*time.Millisecond, nil, "n1")
	evs := watchEvents(t, env)
	stop := startCoordinator(t, env, "c1")
	a := moveHead(t, env, 1, "1", table("a", 100))
	waitRollout(t, env, "1-"+render.Short(a.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)

	// The next rollout reaches n1, whose apply is still running when the
	// leader stops.
	fleet.hold("n1")
	b := moveHead(t, env, 2, "1", table("b", 101))
	cfgs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	// margin: the poll ends as soon as the write lands.
	natstest.Eventually(t, 30*time.Second, "n1's desired config of the second revision", func() bool {
		d, err := cfgs.Get(ctx, contract.DesiredKey("n1"))
		return err == nil && d.Value.GetRevision() == b.Id
	})
	stop()
	put(t, env.Buckets.NodeConfigs, contract.BackupKey("n1"), `{"holder":"x","epoch":"5"}`)

	startCoordinator(t, env, "c2")
	fleet.release(ctx, "n1", true)

	// waitRollout's 60 s margin is far below the 10-minute revert deadline
	// the rollout hung until before.
	r := waitRollout(t, env, "2-"+render.Short(b.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK)
	if c := r.GetCounts(); c.GetReverted() != 1 {
		t.Fatalf("counts = %v; want n1 reverted", c)
	}
	want := render.Fingerprint(render.NodeConfig(a, map[string]string{"zone": "a"}))
	d, err := cfgs.Get(ctx, contract.DesiredKey("n1"))
	if err != nil || !d.Value.GetRevert() || d.Value.GetFingerprint() != want || d.Value.GetRevision() != a.Id {
		t.Fatalf("n1 desired = %v, %v; want a revert to the last applied revision %s (fingerprint %s)", d.Value, err, render.Short(a.Id), render.Short(want))
	}
	evs.wait(t, "ValueUnreadable", contract.BucketNodeConfigs+"/"+contract.BackupKey("n1"))
}

// A control/pause the new term cannot read leaves whether the operators
// paused unknown: the term holds as if they had (no desired config is
// written), until a readable request is written. It used to take the
// unreadable request for "never paused" and write during a pause (chaos
// seed 103, the Paused check: garbage over control/pause during a pause,
// then a takeover).
func TestCoordinator_UnreadablePauseAtStart_HoldsUntilARequestIsWritten(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	if _, err := env.Buckets.Control.Put(ctx, contract.KeyPause, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	startFleet(t, env, 10*time.Millisecond, nil, "n1")
	startCoordinator(t, env, "c1")
	instances := store.New(env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "c1 to announce itself paused", func() bool {
		e, err := instances.Get(ctx, contract.InstanceKey(contract.ComponentCoordinator, "c1"))
		return err == nil && e.Value.GetPause().GetPaused()
	})
	rev := moveHead(t, env, 1, "1", table("t1", 100))
	id := contract.RolloutID(1, rev.Id)
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	// The head was read (the rollout's record exists) and nothing written.
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	natstest.Eventually(t, 30*time.Second, "rollout "+id+" to be recorded", func() bool {
		_, err := rollouts.Get(ctx, id)
		return err == nil
	})
	if _, err := configs.Get(ctx, contract.DesiredKey("n1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("n1's desired config while control/pause is unreadable: %v; want none written", err)
	}
	resume := &sluicev1.PauseRequest{Paused: false, Generation: 1, Reason: "test"}
	b, err := store.Marshal(resume)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Buckets.Control.Put(ctx, contract.KeyPause, b); err != nil {
		t.Fatal(err)
	}
	waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
}

// Garbage over rollouts/last-applied loses the pointer, not what it pointed
// at: the next term takes the newest record that ended in force as the last
// applied, so a node that joins (or comes back after a reap) gets the config
// in force. Before, no config was in force: the joiner got nothing, and a
// revert of a node without a readable backup wrote the empty config (chaos
// seeds 300 and 542, found on virtual time).
func TestCoordinator_UnreadableLastApplied_TheNewestRecordInForceStandsIn(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	startFleet(t, env, 10*time.Millisecond, nil, "n1")
	evs := watchEvents(t, env)
	stop := startCoordinator(t, env, "c1")
	a := moveHead(t, env, 1, "1", table("a", 100))
	waitRollout(t, env, "1-"+render.Short(a.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	stop()
	put(t, env.Buckets.Rollouts, contract.KeyLastApplied, `{"holder":"x","epoch":"5"}`)

	startCoordinator(t, env, "c2")
	evs.wait(t, "ValueUnreadable", contract.BucketRollouts+"/"+contract.KeyLastApplied)
	startFleet(t, env, 10*time.Millisecond, nil, "n2")
	cfgs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	want := render.Fingerprint(render.NodeConfig(a, map[string]string{"zone": "a"}))
	// margin: the poll ends as soon as the write lands.
	natstest.Eventually(t, 30*time.Second, "the joiner n2 given the config in force", func() bool {
		d, err := cfgs.Get(ctx, contract.DesiredKey("n2"))
		return err == nil && d.Value.GetRevision() == a.Id && d.Value.GetFingerprint() == want
	})
}
