package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// memEffects is a working in-memory store for the coordinator's effects,
// with the one rule the KV store enforces beyond CAS: a terminal record is
// never written again.
type memEffects struct {
	desired, backup map[string]*sluicev1.DesiredConfig
	records         map[string]*sluicev1.Rollout
	refs            map[string]*sluicev1.RolloutRef
	invalid         map[string]*sluicev1.InvalidFingerprint
	recordWrites    map[string]int
}

func newMemEffects() *memEffects {
	return &memEffects{desired: map[string]*sluicev1.DesiredConfig{}, backup: map[string]*sluicev1.DesiredConfig{},
		records: map[string]*sluicev1.Rollout{}, refs: map[string]*sluicev1.RolloutRef{},
		invalid: map[string]*sluicev1.InvalidFingerprint{}, recordWrites: map[string]int{}}
}

func (m *memEffects) writeDesired(_ context.Context, d, backup *sluicev1.DesiredConfig) error {
	if backup != nil {
		m.backup[d.GetNode()] = proto.Clone(backup).(*sluicev1.DesiredConfig)
	}
	m.desired[d.GetNode()] = proto.Clone(d).(*sluicev1.DesiredConfig)
	return nil
}

func (m *memEffects) putRecord(r *sluicev1.Rollout) error {
	if cur := m.records[r.GetId()]; cur != nil && contract.Terminal(cur.GetPhase()) {
		return fmt.Errorf("rollout %s: %w", r.GetId(), errTerminalRecord)
	}
	m.records[r.GetId()] = proto.Clone(r).(*sluicev1.Rollout)
	m.recordWrites[r.GetId()]++
	return nil
}

func (m *memEffects) startRollout(_ context.Context, r *sluicev1.Rollout) error {
	if err := m.putRecord(r); err != nil {
		return err
	}
	m.refs[contract.KeyActive] = &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration()}
	return nil
}

func (m *memEffects) saveRollout(_ context.Context, r *sluicev1.Rollout) error { return m.putRecord(r) }

func (m *memEffects) finishRollout(_ context.Context, f rollout.FinishRollout) error {
	if f.Rollout != nil {
		if err := m.putRecord(f.Rollout); err != nil {
			return err
		}
	}
	if f.LastApplied != nil {
		m.refs[contract.KeyLastApplied] = proto.Clone(f.LastApplied).(*sluicev1.RolloutRef)
	}
	if a := m.refs[contract.KeyActive]; a != nil && a.GetRollout() == f.ClearActive {
		delete(m.refs, contract.KeyActive)
	}
	return nil
}

func (m *memEffects) recordInvalid(_ context.Context, f *sluicev1.InvalidFingerprint) error {
	if cur := m.invalid[f.GetFingerprint()]; cur == nil || cur.GetForgiven() != nil {
		m.invalid[f.GetFingerprint()] = proto.Clone(f).(*sluicev1.InvalidFingerprint)
	}
	return nil
}

func (m *memEffects) forgiveInvalid(_ context.Context, f *sluicev1.InvalidFingerprint) error {
	if m.invalid[f.GetFingerprint()] != nil {
		m.invalid[f.GetFingerprint()] = proto.Clone(f).(*sluicev1.InvalidFingerprint)
	}
	return nil
}

// fleet is the scenario's nodes: their presence, and the status each
// reports for a desired config (fail names the nodes whose forward target fails).
type fleet struct {
	nodes  []string
	fail   map[string]bool
	status map[string]*sluicev1.NodeStatus
}

// term runs one leadership term over the stored state: load, then let every
// node report on its desired config until nothing changes.
func (f *fleet) term(t *testing.T, m *memEffects, revs map[string]*sluicev1.Revision, head *sluicev1.Head, now time.Time) []*sluicev1.Event {
	t.Helper()
	var emitted []*sluicev1.Event
	lp := &loop{cfg: Config{Now: func() time.Time { return now }}, fx: m, st: rollout.NewState(),
		emit: func(e *sluicev1.Event) { emitted = append(emitted, e) }}
	ctx := context.Background()
	ev := rollout.Loaded{Head: head, HeadRev: revs[head.GetRevision()], Term: 1}
	ev.HeadRollout = m.records[contract.RolloutID(head.GetGeneration(), head.GetRevision())]
	if a := m.refs[contract.KeyActive]; a != nil {
		ev.Active, ev.ActiveRev = m.records[a.GetRollout()], revs[a.GetRevision()]
	}
	if la := m.refs[contract.KeyLastApplied]; la != nil {
		ev.LastApplied, ev.LastAppliedRev = la, revs[la.GetRevision()]
	}
	for _, n := range f.nodes {
		ev.Presence = append(ev.Presence, &sluicev1.NodePresence{Node: n, Labels: map[string]string{"zone": "a"}})
		if st := f.status[n]; st != nil {
			ev.Status = append(ev.Status, st)
		}
		if d := m.desired[n]; d != nil {
			ev.Desired = append(ev.Desired, d)
		}
		if b := m.backup[n]; b != nil {
			ev.Backups = append(ev.Backups, b)
		}
	}
	for _, fp := range m.invalid {
		ev.Invalid = append(ev.Invalid, fp)
	}
	if err := lp.step(ctx, ev); err != nil {
		t.Fatalf("load: %v", err)
	}
	for changed := true; changed; {
		changed = false
		for _, n := range f.nodes {
			d := m.desired[n]
			if d == nil || f.status[n].GetFingerprint() == d.GetFingerprint() {
				continue
			}
			phase := sluicev1.NodePhase_NODE_PHASE_PROVISIONED
			if f.fail[n] && !d.GetRevert() {
				phase = sluicev1.NodePhase_NODE_PHASE_INVALID
			}
			st := &sluicev1.NodeStatus{Node: n, Phase: phase, Fingerprint: d.GetFingerprint(), Rollout: d.GetRollout(),
				Revision: d.GetRevision(), FailedCheck: "ping"}
			f.status[n] = st
			if err := lp.step(ctx, rollout.Status{S: st}); err != nil {
				t.Fatalf("status of %s: %v", n, err)
			}
			changed = true
		}
	}
	if err := lp.flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return emitted
}

func count(evs []*sluicev1.Event, typ string) int {
	c := 0
	for _, e := range evs {
		if e.GetType() == typ {
			c++
		}
	}
	return c
}

// TestScenario_RestartsNeverRunARolloutTwice runs Decide and the loop's
// perform against stored state across restarts, and asserts the stored state.
func TestScenario_RestartsNeverRunARolloutTwice(t *testing.T) {
	tbl := func(name string, id uint32) *sluicev1.Intent {
		return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id}}}
	}
	good := &sluicev1.Revision{Id: "good0000000000", Intents: []*sluicev1.Intent{tbl("t", 100)}}
	bad := &sluicev1.Revision{Id: "bad00000000000", Intents: []*sluicev1.Intent{tbl("t", 200)}}
	revs := map[string]*sluicev1.Revision{good.Id: good, bad.Id: bad}
	tests := []struct {
		name      string
		budget    string
		fail      []string
		wantPhase sluicev1.RolloutPhase
		wantLast  uint64 // generation of last-applied after the second rollout
	}{
		{"rolled back", "0", []string{"n2"}, sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, 1},
		{"partially failed", "1", []string{"n2"}, sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED, 2},
		{"succeeded", "0", nil, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemEffects()
			f := &fleet{nodes: []string{"n1", "n2", "n3"}, fail: map[string]bool{}, status: map[string]*sluicev1.NodeStatus{}}
			now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
			f.term(t, m, revs, &sluicev1.Head{Revision: good.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "3"}}, now)
			for _, n := range tc.fail {
				f.fail[n] = true
			}
			h2 := &sluicev1.Head{Revision: bad.Id, Generation: 2, Strategy: &sluicev1.Strategy{MaxParallel: "1", FailureBudget: tc.budget}}
			id2 := contract.RolloutID(2, bad.Id)
			first := f.term(t, m, revs, h2, now)
			rec := proto.Clone(m.records[id2]).(*sluicev1.Rollout)
			if rec.GetPhase() != tc.wantPhase || m.refs[contract.KeyLastApplied].GetGeneration() != tc.wantLast || m.refs[contract.KeyActive] != nil {
				t.Fatalf("after the rollout: %s, last-applied %v, active %v; want %s, generation %d, none",
					rec.GetPhase(), m.refs[contract.KeyLastApplied], m.refs[contract.KeyActive], tc.wantPhase, tc.wantLast)
			}
			if count(first, "RolloutStarted") != 1 {
				t.Fatalf("RolloutStarted %d times", count(first, "RolloutStarted"))
			}
			desiredBefore := map[string]string{}
			for n, d := range m.desired {
				desiredBefore[n] = d.GetFingerprint()
			}
			writes := m.recordWrites[id2]

			for restart := range 3 { // restarts, reconnects and takeovers all load the same way
				again := f.term(t, m, revs, h2, now.Add(time.Duration(restart+1)*time.Minute))
				if n := count(again, "RolloutStarted") + count(again, "RolloutAborted") + count(again, "RolloutResumed"); n != 0 {
					t.Fatalf("restart %d: the ended rollout acted again (%d events)", restart, n)
				}
				if m.recordWrites[id2] != writes || !proto.Equal(m.records[id2], rec) {
					t.Fatalf("restart %d: the terminal record was rewritten: %v", restart, m.records[id2])
				}
				for n, d := range m.desired {
					if desiredBefore[n] != d.GetFingerprint() {
						t.Fatalf("restart %d: %s got %s, had %s", restart, n, render.Short(d.GetFingerprint()), render.Short(desiredBefore[n]))
					}
				}
			}
		})
	}
}
