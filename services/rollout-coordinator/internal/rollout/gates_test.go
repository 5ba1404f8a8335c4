package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// gateRun is a rollout of nodes under a strategy with gates, on an
// injected clock; it keeps what the loop would be asked to do.
type gateRun struct {
	t      *testing.T
	s      *State
	fp, id string
	now    time.Time
	starts []string // forward writes, in order
	revert []string // revert writes, in order
	watch  *WatchGates
	events []*sluicev1.Event
	fin    *sluicev1.Rollout
}

func errorRate(max float64) *sluicev1.Gate {
	return &sluicev1.Gate{Name: "error-rate", Prometheus: "http://prom:9090", Query: "job:errors:ratio",
		Max: wrapperspb.Double(max), MinSamples: 3, Deadline: durationpb.New(10 * time.Minute)}
}

func linkAlert() *sluicev1.Gate {
	return &sluicev1.Gate{Name: "links", Prometheus: "http://prom:9090", Alerts: []string{"LinkDown", "BGPSessionDown"},
		Deadline: durationpb.New(5 * time.Minute)}
}

// twoWaves is one canary node, then the rest.
func twoWaves(gates ...*sluicev1.Gate) *sluicev1.Strategy {
	return &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, WaveGrowth: 10, Gates: gates}
}

func newGateRun(t *testing.T, st *sluicev1.Strategy, nodes ...string) *gateRun {
	r1 := testRev("aaaa1111")
	h := withStrategy(head(1, r1.Id, st.GetMaxParallel()), st)
	g := &gateRun{t: t, s: NewState(), fp: targetOf(r1), id: rolloutID(h), now: t0}
	g.decide(Loaded{Head: h, HeadRev: r1, Presence: presence(nodes...)})
	return g
}

func (g *gateRun) decide(ev Event) {
	for _, a := range Decide(g.s, ev, g.now) {
		switch a := a.(type) {
		case WriteDesired:
			if a.Desired.GetRevert() {
				g.revert = append(g.revert, a.Desired.GetNode())
			} else {
				g.starts = append(g.starts, a.Desired.GetNode())
			}
		case WatchGates:
			g.watch = &a
		case Emit:
			g.events = append(g.events, a.Event)
		case FinishRollout:
			if a.Rollout != nil {
				g.fin = a.Rollout
			}
		}
	}
}

func (g *gateRun) at(d time.Duration) { g.now = t0.Add(d); g.decide(Tick{}) }

func (g *gateRun) provision(node string) {
	g.decide(Written{Node: node, Fingerprint: g.fp})
	g.decide(Status{S: status(node, provisioned, g.fp, g.id)})
}

// asked is the boundary the loop is asked to measure gate for, "" none.
func (g *gateRun) asked(gate string) (string, bool) {
	if g.watch == nil {
		return "", false
	}
	for _, c := range g.watch.Checks {
		if c.Gate.Name == gate {
			return c.Before, true
		}
	}
	return "", false
}

func (g *gateRun) measured(gate, before string, m GateMeasured) {
	m.Rollout, m.Gate, m.Before = g.id, gate, before
	g.decide(m)
}

func (g *gateRun) count(typ string) int {
	n := 0
	for _, e := range g.events {
		if e.GetType() == typ {
			n++
		}
	}
	return n
}

func (g *gateRun) phase() sluicev1.RolloutPhase {
	if g.fin != nil {
		return g.fin.GetPhase()
	}
	return g.s.rollout.GetPhase()
}

// A metric gate is asked for after the canary, before wave 2: wave 2 waits
// for its answer, starts when it passes, and the rollout succeeds only
// after the gate passes once more before the end.
func TestGates_MetricGatePassesBeforeEachWaveAndTheEnd(t *testing.T) {
	g := newGateRun(t, twoWaves(errorRate(0.01)), "n1", "n2", "n3")
	if len(g.starts) != 1 {
		t.Fatalf("the canary must start without a gate (nothing changed yet): %v", g.starts)
	}
	if _, ok := g.asked("error-rate"); ok {
		t.Fatalf("metric gate asked for before any wave finished: %+v", g.watch)
	}
	g.provision("n1")
	if before, ok := g.asked("error-rate"); !ok || before != "wave 2" {
		t.Fatalf("after wave 1: want the gate asked for before wave 2, got %+v", g.watch)
	}
	if len(g.starts) != 1 || !strings.Contains(g.s.rollout.GetWaiting(), "waiting for gate error-rate before wave 2: checking") {
		t.Fatalf("wave 2 must wait for the gate: started %v, waiting %q", g.starts, g.s.rollout.GetWaiting())
	}
	g.measured("error-rate", "wave 2", GateMeasured{Samples: 5, Max: 0.004, Min: 0.001})
	if len(g.starts) != 3 || g.s.rollout.GetWaiting() != "" {
		t.Fatalf("gate passed: want wave 2 started and nothing waiting, got %v, %q", g.starts, g.s.rollout.GetWaiting())
	}
	if _, ok := g.asked("error-rate"); ok {
		t.Fatalf("a passed gate is still measured: %+v", g.watch)
	}
	g.provision("n2")
	g.provision("n3")
	if g.fin != nil {
		t.Fatalf("ended without the final gate: %v", g.fin)
	}
	if before, _ := g.asked("error-rate"); before != contract.GateEnd {
		t.Fatalf("want the gate asked for before the end, got %+v", g.watch)
	}
	g.measured("error-rate", contract.GateEnd, GateMeasured{Samples: 5, Max: 0.009})
	if g.phase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("want SUCCEEDED, got %v", g.fin)
	}
	if res := g.fin.GetGates(); len(res) != 1 || res[0].GetVerdict() != contract.GatePassed || res[0].GetBefore() != contract.GateEnd {
		t.Fatalf("record's gate results: %v", res)
	}
	if g.watch == nil || len(g.watch.Checks) != 0 {
		t.Fatalf("an ended rollout must stop every gate measurement: %+v", g.watch)
	}
}

// A value over the threshold fails the gate: the rollout reverts the
// canary, and the record names the gate, query, value and threshold.
func TestGates_MetricGateFailsAndReverts(t *testing.T) {
	tests := []struct {
		name     string
		gate     *sluicev1.Gate
		m        GateMeasured
		wantWhy  string
		wantCmp  string
		wantVal  float64
		wantThrs float64
	}{
		{"over max", errorRate(0.01), GateMeasured{Samples: 5, Max: 0.031, Min: 0.002},
			"blocked by gate error-rate: 0.031 > 0.01 over 5m0s", "<=", 0.031, 0.01},
		{"under min", &sluicev1.Gate{Name: "throughput", Prometheus: "http://p:9090", Query: "sum(rate(pkts[1m]))", Min: wrapperspb.Double(100)},
			GateMeasured{Samples: 20, Max: 500, Min: 42}, "blocked by gate throughput: 42 < 100 over 5m0s", ">=", 42, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateRun(t, twoWaves(tt.gate), "n1", "n2")
			g.provision("n1")
			before, _ := g.asked(tt.gate.GetName())
			g.measured(tt.gate.GetName(), before, tt.m)
			r := g.s.rollout
			if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING || !strings.Contains(r.GetReason(), tt.wantWhy) {
				t.Fatalf("want REVERTING because %q, got %s %q", tt.wantWhy, r.GetPhase(), r.GetReason())
			}
			b := r.GetBlockedBy()
			if b.GetGate() != tt.gate.GetName() || b.GetQuery() != tt.gate.GetQuery() || b.GetValue() != tt.wantVal ||
				b.GetThreshold() != tt.wantThrs || b.GetComparison() != tt.wantCmp || b.GetVerdict() != contract.GateFailed {
				t.Fatalf("blocked_by %v; want gate, query, value %g, %s %g", b, tt.wantVal, tt.wantCmp, tt.wantThrs)
			}
			if len(g.revert) != 1 || g.revert[0] != "n1" || len(g.starts) != 1 {
				t.Fatalf("want n1 reverted and n2 never started, got starts %v reverts %v", g.starts, g.revert)
			}
			if g.count("GateFailed") != 1 {
				t.Fatalf("want one GateFailed event, got %v", g.events)
			}
			g.decide(Status{S: status("n1", provisioned, "", g.id)})
		})
	}
}

// Missing data never passes or fails a gate: no answer or too few samples
// keep the next wave waiting — the record saying why, one event per kind of
// wait — until data comes, or the gate's deadline fails the rollout.
func TestGates_MissingDataWaitsThenFailsAtTheDeadline(t *testing.T) {
	g := newGateRun(t, twoWaves(errorRate(0.01)), "n1", "n2")
	g.provision("n1")
	for i := range 3 {
		g.at(time.Duration(i) * time.Minute)
		g.measured("error-rate", "wave 2", GateMeasured{Err: "dial tcp 10.0.0.9:9090: connect: connection refused"})
	}
	r := g.s.rollout
	if len(g.starts) != 1 || r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
		t.Fatalf("no answer: want wave 2 held and the rollout going on, got %v %s", g.starts, r.GetPhase())
	}
	if !strings.Contains(r.GetWaiting(), "Prometheus did not answer: dial tcp") || !r.GetWaitingUntil().AsTime().Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("waiting %q until %s; want why, and the gate deadline", r.GetWaiting(), r.GetWaitingUntil().AsTime())
	}
	g.measured("error-rate", "wave 2", GateMeasured{Samples: 2, Max: 0.5})
	if len(g.starts) != 1 || !strings.Contains(r.GetWaiting(), "2 of 3 samples") {
		t.Fatalf("too few samples (one far over the threshold): want waiting, neither pass nor fail; got %v %q %s", g.starts, r.GetWaiting(), r.GetPhase())
	}
	if n := g.count("GateWaiting"); n != 2 {
		t.Fatalf("want one GateWaiting per kind of wait (unreachable, samples), got %d: %v", n, g.events)
	}
	g.at(10*time.Minute - time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
		t.Fatalf("failed before its deadline: %q", r.GetReason())
	}
	g.at(10 * time.Minute)
	if r := g.s.rollout; r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING ||
		!strings.Contains(r.GetReason(), "blocked by gate error-rate: gave up after waiting 10m0s for data (error-rate: 2 of 3 samples over 5m0s)") {
		t.Fatalf("at the gate deadline: want REVERTING naming the gate and why, got %s %q", r.GetPhase(), r.GetReason())
	}
}

// Enough samples after too few: the gate passes and the wave starts.
func TestGates_TooFewSamplesThenEnoughPasses(t *testing.T) {
	g := newGateRun(t, twoWaves(errorRate(0.01)), "n1", "n2")
	g.provision("n1")
	g.measured("error-rate", "wave 2", GateMeasured{Samples: 0})
	g.measured("error-rate", "wave 2", GateMeasured{Samples: 3, Max: 0.01, Min: 0})
	if len(g.starts) != 2 {
		t.Fatalf("3 samples at the threshold: want wave 2 started, got %v (%q)", g.starts, g.s.rollout.GetWaiting())
	}
}

// A measurement for another boundary, or for a rollout that is not the
// active one, decides nothing.
func TestGates_StaleMeasurementsAreIgnored(t *testing.T) {
	g := newGateRun(t, twoWaves(errorRate(0.01)), "n1", "n2")
	g.provision("n1")
	g.measured("error-rate", contract.GateEnd, GateMeasured{Samples: 9, Max: 0.9})
	g.decide(GateMeasured{Rollout: "0-other", Gate: "error-rate", Before: "wave 2", Samples: 9, Max: 0.9})
	if g.s.rollout.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING || len(g.starts) != 1 {
		t.Fatalf("a stale measurement decided: %s, %v", g.s.rollout.GetPhase(), g.starts)
	}
}

// With a bake, the end bakes too before the final gates: the last wave's
// effect shows in the metrics only then.
func TestGates_TheEndBakesBeforeTheFinalGate(t *testing.T) {
	st := twoWaves(errorRate(0.01))
	st.BakeTime = durationpb.New(time.Minute)
	g := newGateRun(t, st, "n1")
	g.provision("n1")
	if _, ok := g.asked("error-rate"); ok || g.s.rollout.GetBakeUntil() == nil {
		t.Fatalf("want a bake before the final gate, got asked %+v, bake %v", g.watch, g.s.rollout.GetBakeUntil())
	}
	g.at(time.Minute)
	if before, _ := g.asked("error-rate"); before != contract.GateEnd {
		t.Fatalf("after the bake: want the gate asked before the end, got %+v", g.watch)
	}
}

// An alert gate is read before any node starts, and a named alert firing
// while a wave runs stops and reverts the rollout at once, in-flight nodes
// included.
func TestGates_AlertFiringMidWaveReverts(t *testing.T) {
	g := newGateRun(t, &sluicev1.Strategy{MaxParallel: "2", Gates: []*sluicev1.Gate{linkAlert()}}, "n1", "n2", "n3", "n4")
	if len(g.starts) != 0 || !strings.Contains(g.s.rollout.GetWaiting(), "waiting for gate links: reading the alerts") {
		t.Fatalf("before the alerts were read: started %v, waiting %q", g.starts, g.s.rollout.GetWaiting())
	}
	if before, ok := g.asked("links"); !ok || before != "" {
		t.Fatalf("the alert gate must be watched from the start: %+v", g.watch)
	}
	g.measured("links", "", GateMeasured{})
	if len(g.starts) != 2 || g.s.rollout.GetWaiting() != "" {
		t.Fatalf("alerts quiet: want 2 nodes started, got %v (%q)", g.starts, g.s.rollout.GetWaiting())
	}
	g.provision("n1")
	g.measured("links", "", GateMeasured{Firing: []string{"LinkDown"}})
	r := g.s.rollout
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING || !strings.Contains(r.GetReason(), "blocked by gate links: alert LinkDown firing") {
		t.Fatalf("alert fired: want REVERTING naming it, got %s %q", r.GetPhase(), r.GetReason())
	}
	if b := r.GetBlockedBy(); b.GetVerdict() != contract.GateFiring || len(b.GetFiring()) != 1 {
		t.Fatalf("blocked_by %v", b)
	}
	if c := r.GetCounts(); c.GetStopped() != 2 || c.GetNotStarted() != 1 || len(g.revert) != 2 {
		t.Fatalf("want n2 and n3 stopped in flight, n4 never started, the touched nodes reverted 2 at a time; counts %v, reverts %v", c, g.revert)
	}
	if len(g.watch.Checks) != 0 {
		t.Fatalf("a reverting rollout must stop its gates: %+v", g.watch)
	}
}

// Alerts that cannot be read hold every node start, then fail the rollout
// at the gate's deadline.
func TestGates_UnreadableAlertsWaitThenFail(t *testing.T) {
	g := newGateRun(t, &sluicev1.Strategy{MaxParallel: "1", Gates: []*sluicev1.Gate{linkAlert()}}, "n1", "n2")
	g.measured("links", "", GateMeasured{})
	g.measured("links", "", GateMeasured{Err: "context deadline exceeded"})
	g.provision("n1")
	if len(g.starts) != 1 || !strings.Contains(g.s.rollout.GetWaiting(), "cannot read the alerts") {
		t.Fatalf("alerts unreadable: want n2 held, got %v (%q)", g.starts, g.s.rollout.GetWaiting())
	}
	g.at(5 * time.Minute)
	if r := g.s.rollout; r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING || !strings.Contains(r.GetReason(), "gave up after waiting 5m0s") {
		t.Fatalf("at the deadline: %s %q", r.GetPhase(), r.GetReason())
	}
}

// The loop is told the set of gates to measure only when it changes: a
// tick or a node's report that changes no gate asks for nothing again.
func TestGates_WatchSentOnlyWhenTheSetChanges(t *testing.T) {
	g := newGateRun(t, &sluicev1.Strategy{MaxParallel: "1", Gates: []*sluicev1.Gate{linkAlert()}}, "n1", "n2")
	g.measured("links", "", GateMeasured{})
	g.watch = nil
	g.at(time.Second)
	g.provision("n1")
	g.measured("links", "", GateMeasured{})
	if g.watch != nil {
		t.Fatalf("WatchGates sent again with nothing changed: %+v", g.watch)
	}
}

// A new term (restart, takeover) while a gate holds the next wave asks for
// the gate again — a gate is never taken as passed across terms — and the
// waiting line the last term wrote is cleared once it passes.
func TestGates_ANewTermAsksAgain(t *testing.T) {
	st := twoWaves(errorRate(0.01))
	g := newGateRun(t, st, "n1", "n2")
	g.provision("n1")
	rec := snapshot(g.s.rollout)
	if !strings.HasPrefix(rec.GetWaiting(), contract.GateWaitPrefix) {
		t.Fatalf("the record before the takeover: waiting %q", rec.GetWaiting())
	}
	r1 := testRev("aaaa1111")
	n := &gateRun{t: t, s: NewState(), fp: g.fp, id: g.id, now: t0.Add(time.Minute)}
	n.decide(Loaded{Head: withStrategy(head(1, r1.Id, st.GetMaxParallel()), st), HeadRev: r1, Active: rec, ActiveRev: r1,
		Presence: presence("n1", "n2"),
		Desired:  []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: g.fp, Rollout: g.id, Revision: r1.Id}},
		Status:   []*sluicev1.NodeStatus{status("n1", provisioned, g.fp, g.id)}})
	if before, ok := n.asked("error-rate"); !ok || before != "wave 2" || len(n.starts) != 0 {
		t.Fatalf("new term: want the gate asked again before wave 2 and nothing started, got %+v, %v", n.watch, n.starts)
	}
	n.measured("error-rate", "wave 2", GateMeasured{Samples: 3, Max: 0})
	if len(n.starts) != 1 || n.s.rollout.GetWaiting() != "" {
		t.Fatalf("gate passed in the new term: want n2 started and no waiting line, got %v, %q", n.starts, n.s.rollout.GetWaiting())
	}
}

// A gate that passed before a window closed is asked again when the window
// opens: its verdict would be hours old.
func TestGates_AskedAgainAfterAWindowWait(t *testing.T) {
	st := twoWaves(errorRate(0.01))
	st.Windows = []string{"Sat 12:00-13:00"} // t0 is Saturday 12:00
	st.ProgressDeadline = durationpb.New(2 * time.Hour)
	g := newGateRun(t, st, "n1", "n2")
	g.now = t0.Add(30 * time.Minute)
	g.provision("n1")
	g.now = t0.Add(61 * time.Minute) // the window closed while the gate was asked
	g.measured("error-rate", "wave 2", GateMeasured{Samples: 3, Max: 0})
	if len(g.starts) != 1 || !strings.Contains(g.s.rollout.GetWaiting(), "waiting for the window") {
		t.Fatalf("window closed: want wave 2 waiting for it, got %v, %q", g.starts, g.s.rollout.GetWaiting())
	}
	g.at(7 * 24 * time.Hour) // next Saturday 12:00
	if before, ok := g.asked("error-rate"); !ok || before != "wave 2" || len(g.starts) != 1 {
		t.Fatalf("window open again: want the gate asked afresh before wave 2, got %+v, started %v (%s %q %q)", g.watch, g.starts, g.phase(), g.fin.GetReason(), g.s.rollout.GetWaiting())
	}
	g.measured("error-rate", "wave 2", GateMeasured{Samples: 3, Max: 0})
	if len(g.starts) != 2 {
		t.Fatalf("fresh verdict passed: want wave 2 started, got %v", g.starts)
	}
}

// A rollout with gates that ends while another head waits stops its gate
// measurements, though the next rollout has no gates of its own.
func TestGates_TheNextRolloutStopsTheLastOnesMeasurements(t *testing.T) {
	g := newGateRun(t, &sluicev1.Strategy{MaxParallel: "1", Gates: []*sluicev1.Gate{linkAlert()}}, "n1")
	g.measured("links", "", GateMeasured{})
	r2 := testRev("bbbb2222")
	g.decide(HeadMoved{Head: head(2, r2.Id, "1"), Rev: r2})
	g.watch = nil
	g.provision("n1")
	if g.fin.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || g.s.rollout == nil {
		t.Fatalf("want the first rollout SUCCEEDED and the next one started, got %v, %v", g.fin.GetPhase(), g.s.rollout)
	}
	if g.watch == nil || len(g.watch.Checks) != 0 {
		t.Fatalf("the ended rollout's alert gate is still measured: %+v", g.watch)
	}
}
