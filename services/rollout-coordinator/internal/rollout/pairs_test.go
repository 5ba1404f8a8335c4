package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// paired is the presence of nodes given as name → redundancy group ("" for
// none), all in zone a.
func paired(groups map[string]string) []*sluicev1.NodePresence {
	var ps []*sluicev1.NodePresence
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range groups {
			if !yield(k) {
				return
			}
		}
	}) {
		l := map[string]string{"zone": "a"}
		if g := groups[n]; g != "" {
			l[contract.LabelPair] = g
		}
		ps = append(ps, &sluicev1.NodePresence{Node: n, Labels: l})
	}
	return ps
}

// pairRun drives one rollout and checks, after every decision, that no
// two members of a group are unproven together: written and not yet
// reported Provisioned (and, with a staged bake, not yet past the bake
// after that).
type pairRun struct {
	t      *testing.T
	s      *State
	groups map[string]string
	fp, id string
	now    time.Time
	// written is when each node's desired config was written; proven when
	// it was reported Provisioned and, with bake, when the next bake passed.
	written  map[string]time.Time
	reported map[string]time.Time
	events   []*sluicev1.Event
	bake     bool
}

func newPairRun(t *testing.T, groups map[string]string, st *sluicev1.Strategy) *pairRun {
	r1 := testRev("aaaa1111")
	h := withStrategy(head(1, r1.Id, st.GetMaxParallel()), st)
	p := &pairRun{t: t, s: NewState(), groups: groups, fp: targetOf(r1), id: rolloutID(h), now: t0,
		written: map[string]time.Time{}, reported: map[string]time.Time{}, bake: st.GetBakeTime().AsDuration() > 0}
	p.decide(Loaded{Head: h, HeadRev: r1, Presence: paired(groups)})
	return p
}

func (p *pairRun) decide(ev Event) []Action {
	p.t.Helper()
	acts := Decide(p.s, ev, p.now)
	for _, a := range acts {
		switch a := a.(type) {
		case WriteDesired:
			p.written[a.Desired.GetNode()] = p.now
		case Emit:
			p.events = append(p.events, a.Event)
		}
	}
	p.check()
	return acts
}

// provision reports node Provisioned, after its write has landed.
func (p *pairRun) provision(node string) {
	p.t.Helper()
	if _, ok := p.written[node]; !ok {
		p.t.Fatalf("%s reported before its desired config was written (written: %v)", node, p.written)
	}
	p.decide(Written{Node: node, Fingerprint: p.fp})
	p.reported[node] = p.now // reported from here: the decision may start its mate
	p.decide(Status{S: status(node, provisioned, p.fp, p.id)})
}

// check: no two members of a group are both in flight (written, not
// reported) — the decider's own view of unbaked members is checked by
// the scenarios' write times.
func (p *pairRun) check() {
	p.t.Helper()
	inFlight := map[string][]string{}
	for n, g := range p.groups {
		if g == "" {
			continue
		}
		if _, w := p.written[n]; w {
			if _, r := p.reported[n]; !r {
				inFlight[g] = append(inFlight[g], n)
			}
		}
	}
	for g, ns := range inFlight {
		if len(ns) > 1 {
			p.t.Fatalf("at %s, members %v of group %s are in flight together", p.now.Sub(t0), ns, g)
		}
	}
}

func (p *pairRun) wrote(node string) bool { _, ok := p.written[node]; return ok }

func (p *pairRun) event(typ, node string) *sluicev1.Event {
	for _, e := range p.events {
		if e.GetType() == typ && (node == "" || e.GetNode() == node) {
			return e
		}
	}
	return nil
}

// Without a bake a member waits only for its mate's report; nodes of no
// group and of other groups fill the free slots meanwhile.
func TestPairs_NeverTwoMembersInFlight(t *testing.T) {
	p := newPairRun(t, map[string]string{"a1": "pa", "a2": "pa", "b1": "pb", "b2": "pb", "c1": ""},
		&sluicev1.Strategy{MaxParallel: "4"})
	for _, n := range []string{"a1", "b1", "c1"} {
		if !p.wrote(n) {
			t.Fatalf("%s not started at once (written: %v)", n, p.written)
		}
	}
	if p.wrote("a2") || p.wrote("b2") {
		t.Fatalf("a second member started beside its mate: written %v", p.written)
	}
	e := p.event("NodeWaitingForPair", "a2")
	if e == nil || !strings.Contains(e.GetReason(), "a1") || !strings.Contains(e.GetReason(), contract.LabelPair) {
		t.Fatalf("no event says a2 waits for a1 of its group: %v", p.events)
	}
	p.now = p.now.Add(time.Second)
	p.provision("a1")
	if !p.wrote("a2") || p.wrote("b2") {
		t.Fatalf("after a1 reported: want a2 started and b2 still waiting for b1; written %v", p.written)
	}
	p.provision("b1")
	p.provision("c1")
	p.provision("a2")
	p.provision("b2")
	if _, ok := findAction[FinishRollout](p.decide(Tick{})); !ok && p.s.rollout != nil {
		t.Fatalf("the rollout did not end: %s", counts(p.s))
	}
}

// With waves and a bake, a member provisioned in a wave is unproven until
// the bake after it: its mate starts only then, in the next wave.
func TestPairs_MateWaitsForTheBake(t *testing.T) {
	p := newPairRun(t, map[string]string{"a1": "pa", "a2": "pa", "x1": "", "x2": "", "x3": ""},
		&sluicev1.Strategy{MaxParallel: "10", FirstWave: 2, WaveGrowth: 2, BakeTime: durationpb.New(time.Minute)})
	if !p.wrote("a1") || !p.wrote("x1") || p.wrote("a2") {
		t.Fatalf("wave 1: want a1 and x1 (a2 waits for a1), got %v", p.written)
	}
	p.now = p.now.Add(time.Second)
	p.provision("a1")
	p.provision("x1")
	if p.wrote("a2") {
		t.Fatalf("a2 started before a1's wave baked")
	}
	p.now = p.now.Add(30 * time.Second)
	p.decide(Tick{})
	if p.wrote("a2") {
		t.Fatalf("a2 started during the bake")
	}
	p.now = p.now.Add(31 * time.Second)
	p.decide(Tick{})
	if !p.wrote("a2") {
		t.Fatalf("a2 not started once a1's wave baked: written %v, %s", p.written, counts(p.s))
	}
}

// Within one wave whose remaining nodes all wait for members awaiting the
// bake, the wave bakes early (else nothing would bake them) and carries on;
// the bake at the wave's end still comes. Nodes of no group fill the
// wave's free places meanwhile.
func TestPairs_EarlyBakeWithinAWave(t *testing.T) {
	p := newPairRun(t, map[string]string{"a1": "pa", "a2": "pa", "b1": "pb", "b2": "pb", "z1": ""},
		&sluicev1.Strategy{MaxParallel: "10", FirstWave: 4, WaveGrowth: 2, BakeTime: durationpb.New(time.Minute)})
	if !p.wrote("a1") || !p.wrote("b1") || !p.wrote("z1") || p.wrote("a2") || p.wrote("b2") {
		t.Fatalf("wave 1 (4 nodes): want a1, b1 and z1 started, a2 and b2 waiting; got %v", p.written)
	}
	p.now = p.now.Add(time.Second)
	p.provision("a1")
	p.provision("b1")
	if e := p.event("RolloutBaking", ""); e != nil {
		t.Fatalf("baked with z1 still in flight: %v", e)
	}
	p.provision("z1")
	if e := p.event("RolloutBaking", ""); e == nil || !strings.Contains(e.GetReason(), "a2 waits for a1, b1") {
		t.Fatalf("want an early bake for a2 and b2 once nothing is in flight, got events %v", p.events)
	}
	p.now = p.now.Add(30 * time.Second)
	p.decide(Tick{})
	if p.wrote("a2") {
		t.Fatalf("a2 started during the early bake")
	}
	p.now = p.now.Add(31 * time.Second)
	p.decide(Tick{})
	if !p.wrote("a2") || p.wrote("b2") {
		t.Fatalf("after the early bake: want a2 (the last of wave 1) and not b2 (wave 2); got %v", p.written)
	}
	p.now = p.now.Add(time.Second)
	p.provision("a2")
	p.decide(Tick{})
	if p.wrote("b2") {
		t.Fatalf("b2 (wave 2) started without the bake after wave 1")
	}
	p.now = p.now.Add(61 * time.Second)
	p.decide(Tick{})
	if !p.wrote("b2") {
		t.Fatalf("b2 not started after wave 1 baked: %s", counts(p.s))
	}
}

// Nodes of no group are not held back: with no pair label the order and
// the waves are today's.
// A member that leaves in flight frees its group in the step that sees it
// go, and that step's NodeSkipped carries the step's time: the mate's
// write, decided in the same step, can never look older than the event
// that allowed it (chaos seed 52: stamped at its publish, the event came
// 57 ms after the mate's write under load).
func TestPairs_LeaveFreesTheGroupAtTheDecisionsTime(t *testing.T) {
	p := newPairRun(t, map[string]string{"a1": "pa", "a2": "pa"}, &sluicev1.Strategy{MaxParallel: "2"})
	if !p.wrote("a1") || p.wrote("a2") {
		t.Fatalf("want a1 started and a2 waiting, got %v", p.written)
	}
	p.now = p.now.Add(1500 * time.Millisecond)
	p.reported["a1"] = p.now // freed from here: it left
	p.decide(Presence{Node: "a1"})
	if !p.wrote("a2") {
		t.Fatalf("a2 did not start when a1 left: written %v", p.written)
	}
	e := p.event("NodeSkipped", "a1")
	if e == nil || e.GetTime() == nil {
		t.Fatalf("no NodeSkipped with a time for a1: %v", p.events)
	}
	if got := e.GetTime().AsTime(); !got.Equal(p.now) {
		t.Fatalf("NodeSkipped stamped %s, want the decision's time %s", got.Sub(t0), p.now.Sub(t0))
	}
}

func TestPairs_NoLabelNoChange(t *testing.T) {
	p := newPairRun(t, map[string]string{"n1": "", "n2": "", "n3": ""}, &sluicev1.Strategy{MaxParallel: "3"})
	if len(p.written) != 3 {
		t.Fatalf("want all three started at once, got %v", p.written)
	}
	if e := p.event("NodeWaitingForPair", ""); e != nil {
		t.Fatalf("unexpected %v", e)
	}
}

// A new term does not know which provisioned members were baked: it takes
// them as unbaked, and their mates wait for the next bake.
func TestPairs_TakeoverKeepsMatesWaiting(t *testing.T) {
	// One wave of three: a1 and x1 start, a2 waits for a1 within the wave.
	groups := map[string]string{"a1": "pa", "a2": "pa", "x1": ""}
	st := &sluicev1.Strategy{MaxParallel: "10", FirstWave: 3, WaveGrowth: 2, BakeTime: durationpb.New(time.Minute)}
	p := newPairRun(t, groups, st)
	p.now = p.now.Add(time.Second)
	p.provision("a1")
	if p.wrote("a2") {
		t.Fatalf("a2 started before a1's wave baked")
	}
	// A new term loads what the stores hold: a1 provisioned by this
	// rollout, x1 in flight, a2 untouched.
	r1 := testRev("aaaa1111")
	rec := snapshot(p.s.rollout)
	l := Loaded{Head: withStrategy(head(1, r1.Id, "10"), st), HeadRev: r1, Presence: paired(groups), Active: rec, ActiveRev: r1}
	l.Desired = []*sluicev1.DesiredConfig{
		{Node: "a1", Fingerprint: p.fp, Rollout: p.id, Revision: r1.Id, Config: render0(r1)},
		{Node: "x1", Fingerprint: p.fp, Rollout: p.id, Revision: r1.Id, Config: render0(r1)},
	}
	l.Status = []*sluicev1.NodeStatus{status("a1", provisioned, p.fp, p.id)}
	q := &pairRun{t: t, s: NewState(), groups: groups, fp: p.fp, id: p.id, now: p.now.Add(time.Second),
		written: map[string]time.Time{"a1": t0, "x1": t0}, reported: map[string]time.Time{"a1": p.now}}
	q.decide(l)
	if q.wrote("a2") && !q.written["a2"].Equal(t0) {
		t.Fatalf("a2 started by the new term beside a1, which it cannot know baked")
	}
	q.now = q.now.Add(time.Second)
	q.provision("x1")
	q.decide(Tick{})
	if q.wrote("a2") {
		t.Fatalf("a2 started before a bake after the takeover")
	}
	if e := q.event("RolloutBaking", ""); e == nil {
		t.Fatalf("no bake for a2 once x1 reported: %v", q.events)
	}
	q.now = q.now.Add(61 * time.Second)
	q.decide(Tick{})
	if !q.wrote("a2") {
		t.Fatalf("a2 not started after the new term's bake: %s", counts(q.s))
	}
}
