package coordinator

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// TestLoop_AtItsDeadline_ANodesStatusIsReadAgain: a node whose final
// report the watch never delivered (its consumer sat on a server that
// stopped: chaos seed 12) is not timed out when the bucket has the report:
// at the deadline the loop reads the status again and hands it to decide.
// Without a report in the bucket the node still times out.
func TestLoop_AtItsDeadline_ANodesStatusIsReadAgain(t *testing.T) {
	rev := &sluicev1.Revision{Id: "rev0000000000001", Intents: []*sluicev1.Intent{
		{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}}}
	head := &sluicev1.Head{Revision: rev.Id, Generation: 1,
		Strategy: &sluicev1.Strategy{MaxParallel: "1", ApplyDeadline: durationpb.New(time.Minute)}}
	for _, tc := range []struct {
		name        string
		inTheBucket bool
		want        sluicev1.RolloutPhase
	}{
		{"the report is in the bucket", true, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED},
		{"no report anywhere", false, sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING}, // timed out, over the budget of 0
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
			m := newMemEffects()
			var emitted []*sluicev1.Event
			lp := &loop{cfg: Config{Now: func() time.Time { return now }}, fx: m, st: rollout.NewState(), log: zerolog.Nop(),
				emit:       func(e *sluicev1.Event) { emitted = append(emitted, e) },
				status:     store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
				quarantine: events.NewQuarantine(events.NewEmitter(nil, zerolog.Nop(), "test", nil))}
			if err := lp.step(ctx, rollout.Loaded{Head: head, HeadRev: rev, Term: 1,
				Presence: []*sluicev1.NodePresence{{Node: "n1"}}}); err != nil {
				t.Fatal(err)
			}
			d := m.desired["n1"]
			if d == nil {
				t.Fatal("n1 was not written")
			}
			report := func(phase sluicev1.NodePhase) *sluicev1.NodeStatus {
				return &sluicev1.NodeStatus{Node: "n1", Phase: phase, Fingerprint: d.GetFingerprint(), Rollout: d.GetRollout(),
					Revision: d.GetRevision(), Operation: d.GetOperation()}
			}
			// The acknowledgement arrives through the watch …
			if err := lp.step(ctx, rollout.Status{S: report(sluicev1.NodePhase_NODE_PHASE_PROVISIONING)}); err != nil {
				t.Fatal(err)
			}
			// … the final report lands in the bucket only.
			if tc.inTheBucket {
				statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
				if _, err := statuses.Create(ctx, "n1", report(sluicev1.NodePhase_NODE_PHASE_PROVISIONED)); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(2 * time.Minute) // past the apply deadline
			if err := lp.step(ctx, rollout.Tick{Recheck: true}); err != nil {
				t.Fatal(err)
			}
			r := m.records[contract.RolloutID(1, rev.Id)]
			timedOut := slices.Contains(types(emitted), "NodeTimedOut")
			if r.GetPhase() != tc.want || timedOut == tc.inTheBucket {
				t.Fatalf("rollout %s (%s), events %v; want %s", r.GetPhase(), r.GetReason(), types(emitted), tc.want)
			}
		})
	}
}

func types(evs []*sluicev1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.GetType())
	}
	return out
}

// TestLoop_ANodeComingBack_HasItsDesiredConfigReadFirst: a node whose
// desired config the reaper deleted without the loop hearing of it (no
// status deletion: chaos seed 160) is configured afresh when it comes back;
// one whose config is still in the bucket is not written again.
func TestLoop_ANodeComingBack_HasItsDesiredConfigReadFirst(t *testing.T) {
	rev := &sluicev1.Revision{Id: "rev0000000000001", Intents: []*sluicev1.Intent{
		{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}}}
	head := &sluicev1.Head{Revision: rev.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "1"}}
	for _, tc := range []struct {
		name        string
		inTheBucket bool
		leaveSeen   bool // else only its agent's new start time tells it was away
		wantWrite   bool
	}{
		{"its config was reaped unseen", false, true, true},
		{"its config is still there", true, true, false},
		{"its leave was not seen, its agent restarted, its config was reaped", false, false, true},
		{"its leave was not seen, its agent restarted, its config is still there", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			m := newMemEffects()
			nodeconfigs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
			lp := &loop{cfg: Config{Now: time.Now}, fx: m, st: rollout.NewState(), log: zerolog.Nop(),
				emit: func(*sluicev1.Event) {}, nodeconfigs: nodeconfigs,
				desiredLast: store.NewBatcher(env.Conn, contract.BucketNodeConfigs).Last,
				quarantine:  events.NewQuarantine(events.NewEmitter(nil, zerolog.Nop(), "test", nil))}
			if err := lp.step(ctx, rollout.Loaded{Head: head, HeadRev: rev, Term: 1}); err != nil {
				t.Fatal(err)
			}
			p := &sluicev1.NodePresence{Node: "n1", StartedAt: timestamppb.New(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))}
			if err := lp.step(ctx, rollout.Presence{Node: "n1", P: p}); err != nil {
				t.Fatal(err)
			}
			d := m.desired["n1"]
			if d == nil {
				t.Fatal("n1 was not configured when it joined")
			}
			if tc.inTheBucket {
				if _, err := nodeconfigs.Create(ctx, contract.DesiredKey("n1"), d); err != nil {
					t.Fatal(err)
				}
			}
			// It leaves, and comes back with its agent started again.
			if tc.leaveSeen {
				if err := lp.step(ctx, rollout.Presence{Node: "n1"}); err != nil {
					t.Fatal(err)
				}
			}
			p = &sluicev1.NodePresence{Node: "n1", StartedAt: timestamppb.New(p.GetStartedAt().AsTime().Add(time.Minute))}
			delete(m.desired, "n1")
			if err := lp.step(ctx, rollout.Presence{Node: "n1", P: p}); err != nil {
				t.Fatal(err)
			}
			if got := m.desired["n1"] != nil; got != tc.wantWrite {
				t.Fatalf("n1 written again when it came back: %v; want %v", got, tc.wantWrite)
			}
			if tc.wantWrite && m.desired["n1"].GetFingerprint() != d.GetFingerprint() {
				t.Fatalf("n1 configured with %s; want %s", m.desired["n1"].GetFingerprint(), d.GetFingerprint())
			}
		})
	}
}

// TestLoop_Verify_ConfiguresAfreshANodeWhoseKeyWasDeletedUnheard: a
// listing of the nodeconfigs keys that lacks a node the state believes
// configured (its key deleted without the loop hearing of it, its agent not
// restarted) configures it afresh once the stream's leader confirms the key
// is gone; a node whose key is listed, one whose write landed after the
// listing began, and one a short listing missed but the leader has (chaos
// seed 47: a listing may end early) are left alone.
func TestLoop_Verify_ConfiguresAfreshANodeWhoseKeyWasDeletedUnheard(t *testing.T) {
	rev := &sluicev1.Revision{Id: "rev0000000000001", Intents: []*sluicev1.Intent{
		{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}}}
	head := &sluicev1.Head{Revision: rev.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "3"}}
	ctx := context.Background()
	env := natstest.Start(t, contract.DefaultSettings())
	m := newMemEffects()
	lp := &loop{cfg: Config{Now: time.Now}, fx: m, st: rollout.NewState(), log: zerolog.Nop(),
		emit: func(*sluicev1.Event) {}, quarantine: events.NewQuarantine(events.NewEmitter(nil, zerolog.Nop(), "test", nil)),
		desiredLast: store.NewBatcher(env.Conn, contract.BucketNodeConfigs).Last}
	if err := lp.step(ctx, rollout.Loaded{Head: head, HeadRev: rev, Term: 1,
		Presence: []*sluicev1.NodePresence{{Node: "n1"}, {Node: "n2"}, {Node: "n3"}}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		d := m.desired[n]
		if d == nil {
			t.Fatalf("%s was not configured", n)
		}
		// Provisioned: the rollout ends, the nodes stay configured.
		if err := lp.step(ctx, rollout.Status{S: &sluicev1.NodeStatus{Node: n, Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED,
			Fingerprint: d.GetFingerprint(), Rollout: d.GetRollout(), Revision: d.GetRevision(), Operation: d.GetOperation()}}); err != nil {
			t.Fatal(err)
		}
	}
	if r := m.records[contract.RolloutID(1, rev.Id)]; r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("rollout %s (%s)", r.GetPhase(), r.GetReason())
	}
	// The listing has n1 only (it ended early: n4's key is in the bucket).
	if _, err := env.Buckets.NodeConfigs.Put(ctx, contract.DesiredKey("n4"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := lp.step(ctx, rollout.Presence{Node: "n4", P: &sluicev1.NodePresence{Node: "n4"}}); err != nil {
		t.Fatal(err)
	}
	if m.desired["n4"] == nil {
		t.Fatal("n4 was not configured")
	}
	listing := desiredKeys{started: time.Now(), keys: map[string]bool{contract.DesiredKey("n1"): true}}
	lp.noteLanded(rollout.WriteDesired{Desired: &sluicev1.DesiredConfig{Node: "n3"}}) // landed after the listing began
	clear(m.desired)
	if err := lp.step(ctx, lp.listedEvent(listing)); err != nil {
		t.Fatal(err)
	}
	if m.desired["n2"] == nil || m.desired["n1"] != nil || m.desired["n3"] != nil || m.desired["n4"] != nil {
		t.Fatalf("written again: n1 %v, n2 %v, n3 %v, n4 %v; want only n2",
			m.desired["n1"] != nil, m.desired["n2"] != nil, m.desired["n3"] != nil, m.desired["n4"] != nil)
	}
	// A listing that failed changes nothing.
	clear(m.desired)
	if ev := lp.listedEvent(desiredKeys{started: time.Now(), err: errors.New("timeout")}); ev != nil {
		t.Fatalf("a failed listing is handed to decide: %#v", ev)
	}
}

// A freeze stored before the head moved holds the head's first wave even
// when the freezes' watch has not delivered it yet (the two watches have no
// order between them: chaos seed 153 started a wave inside a freeze written
// 100 ms before the apply).
func TestLoop_AFreezeStoredBeforeTheHead_HoldsItsFirstWave(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	now := time.Now()
	rev := &sluicev1.Revision{Id: "rev0000000000002", Intents: []*sluicev1.Intent{
		{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}}}}
	revisions := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	if _, err := revisions.Create(ctx, rev.Id, rev); err != nil {
		t.Fatal(err)
	}
	freezes := store.New(env.Buckets.Control, func() *sluicev1.Freeze { return &sluicev1.Freeze{} })
	if _, err := freezes.Create(ctx, contract.FreezeKey("f1"), &sluicev1.Freeze{Id: "f1", From: timestamppb.New(now.Add(-time.Minute)),
		To: timestamppb.New(now.Add(time.Hour)), Reason: "change freeze"}); err != nil {
		t.Fatal(err)
	}
	m := newMemEffects()
	lp := &loop{cfg: Config{Now: func() time.Time { return now }}, fx: m, st: rollout.NewState(), log: zerolog.Nop(),
		emit:      func(*sluicev1.Event) {},
		revisions: revisions, freezes: freezes,
		quarantine: events.NewQuarantine(events.NewEmitter(nil, zerolog.Nop(), "test", nil))}
	if err := lp.step(ctx, rollout.Loaded{Term: 1, Presence: []*sluicev1.NodePresence{{Node: "n1"}}}); err != nil {
		t.Fatal(err)
	}
	// The head arrives; the freeze's watch event has not.
	ev, err := lp.headEvent(ctx, store.Entry[*sluicev1.Head]{Key: contract.KeyHead, Value: &sluicev1.Head{Revision: rev.Id, Generation: 1,
		Strategy: &sluicev1.Strategy{MaxParallel: "1"}}}, true)
	if err != nil || ev == nil {
		t.Fatalf("head event = %v, %v", ev, err)
	}
	if err := lp.step(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if d := m.desired["n1"]; d != nil {
		t.Fatalf("n1 was written %s inside a freeze stored before the head moved", d.GetFingerprint())
	}
}
