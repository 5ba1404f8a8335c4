package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// windowRun is a rollout of nodes under a strategy with windows, on an
// injected clock starting on Saturday 2026-11-21 12:00 UTC.
type windowRun struct {
	t       *testing.T
	s       *State
	fp, id  string
	now     time.Time
	written map[string]time.Time
	events  []*sluicev1.Event
	fin     *sluicev1.Rollout
}

func newWindowRun(t *testing.T, st *sluicev1.Strategy, nodes ...string) *windowRun {
	r1 := testRev("aaaa1111")
	h := withStrategy(head(1, r1.Id, st.GetMaxParallel()), st)
	w := &windowRun{t: t, s: NewState(), fp: targetOf(r1), id: rolloutID(h), now: t0, written: map[string]time.Time{}}
	if t0.Weekday() != time.Saturday {
		t.Fatalf("t0 %s is not a Saturday: the cases below assume it", t0)
	}
	w.decide(Loaded{Head: h, HeadRev: r1, Presence: presence(nodes...)})
	return w
}

func (w *windowRun) decide(ev Event) {
	for _, a := range Decide(w.s, ev, w.now) {
		switch a := a.(type) {
		case WriteDesired:
			w.written[a.Desired.GetNode()] = w.now
		case Emit:
			w.events = append(w.events, a.Event)
		case FinishRollout:
			if a.Rollout != nil {
				w.fin = a.Rollout
			}
		}
	}
}

// at moves the clock to t and ticks.
func (w *windowRun) at(t time.Time) { w.now = t; w.decide(Tick{}) }

func (w *windowRun) provision(node string) {
	w.decide(Written{Node: node, Fingerprint: w.fp})
	w.decide(Status{S: status(node, provisioned, w.fp, w.id)})
}

func (w *windowRun) event(typ string) *sluicev1.Event {
	for _, e := range w.events {
		if e.GetType() == typ {
			return e
		}
	}
	return nil
}

func day(d int, hh, mm int) time.Time { return time.Date(2026, 11, d, hh, mm, 0, 0, time.UTC) }

// Waves start only within the window: the first waits from Saturday to
// Monday 09:00, the record saying why and until when; a wave in flight when
// the window closes finishes; the next waits for Tuesday. Waiting does not
// count against the progress deadline (1h): the clock stands still.
func TestWindows_WavesStartOnlyWithinAWindow(t *testing.T) {
	w := newWindowRun(t, &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, WaveGrowth: 2,
		Windows: []string{"Mon-Fri 09:00-09:20"}}, "n1", "n2", "n3")
	if len(w.written) != 0 {
		t.Fatalf("started on a Saturday: %v", w.written)
	}
	r := w.s.rollout
	if !strings.Contains(r.GetWaiting(), "waiting for the window Mon-Fri 09:00-09:20") || !r.GetWaitingUntil().AsTime().Equal(day(23, 9, 0)) {
		t.Fatalf("record waiting %q until %s; want the window named and Monday 09:00", r.GetWaiting(), r.GetWaitingUntil().AsTime())
	}
	if e := w.event("RolloutWaitingForWindow"); e == nil || !strings.Contains(e.GetReason(), "2026-11-23T09:00:00Z") {
		t.Fatalf("no event says the rollout waits until Monday 09:00: %v", w.events)
	}
	waits := len(w.events)
	w.at(day(22, 12, 0)) // Sunday
	if len(w.written) != 0 || len(w.events) != waits {
		t.Fatalf("Sunday: started %v, or said it waits again: %v", w.written, w.events[waits:])
	}
	w.at(day(23, 9, 0)) // Monday: wave 1
	if len(w.written) != 1 || w.written["n1"].IsZero() {
		t.Fatalf("Monday 09:00: want wave 1 (n1) started, got %v", w.written)
	}
	if r := w.s.rollout; r.GetWaiting() != "" || r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
		t.Fatalf("after the window opened: waiting %q, phase %s (the 45 hours of waiting must not count against the 1h progress deadline)",
			r.GetWaiting(), r.GetPhase())
	}
	w.now = day(23, 9, 25) // n1 finishes after the window closed: it counts
	w.provision("n1")
	if len(w.written) != 1 {
		t.Fatalf("wave 2 started after the window closed: %v", w.written)
	}
	if r := w.s.rollout; r.GetCounts().GetProvisioned() != 1 || !r.GetWaitingUntil().AsTime().Equal(day(24, 9, 0)) {
		t.Fatalf("after 09:20: want n1 provisioned and wave 2 waiting for Tuesday 09:00; got %v until %s", r.GetCounts(), r.GetWaitingUntil().AsTime())
	}
	w.at(day(24, 9, 0))
	if len(w.written) != 3 {
		t.Fatalf("Tuesday 09:00: want wave 2 (n2, n3) started, got %v; ended %v (%s)", w.written, w.fin.GetPhase(), w.fin.GetReason())
	}
	w.provision("n2")
	w.provision("n3")
	if w.fin.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || w.fin.GetWaiting() != "" {
		t.Fatalf("want SUCCEEDED with nothing waiting, got %v", w.fin)
	}
}

// A rollout without waves is one wave: it starts within a window, then runs
// to its end whatever the clock says.
func TestWindows_ARolloutWithoutWavesStartsWithinOne(t *testing.T) {
	w := newWindowRun(t, &sluicev1.Strategy{MaxParallel: "1", Windows: []string{"Sat 13:00-14:00", "Sun 10:00-11:00"}}, "n1", "n2")
	if len(w.written) != 0 {
		t.Fatalf("started before Saturday 13:00: %v", w.written)
	}
	if got := w.s.rollout.GetWaitingUntil().AsTime(); !got.Equal(day(21, 13, 0)) {
		t.Fatalf("waiting until %s; want the first window to open, Saturday 13:00", got)
	}
	w.at(day(21, 13, 30))
	if len(w.written) != 1 {
		t.Fatalf("within the window: want n1 started, got %v", w.written)
	}
	w.now = day(21, 15, 0) // past the window: the rollout goes on
	w.provision("n1")
	if len(w.written) != 2 {
		t.Fatalf("after the window closed: n2 must still start (one wave, already started), got %v", w.written)
	}
}

// No windows: nothing waits (today's behaviour).
func TestWindows_NoneMeansAnyTime(t *testing.T) {
	w := newWindowRun(t, &sluicev1.Strategy{MaxParallel: "2", FirstWave: 1, BakeTime: durationpb.New(time.Second)}, "n1", "n2")
	if len(w.written) != 1 || w.event("RolloutWaitingForWindow") != nil || w.s.rollout.GetWaiting() != "" {
		t.Fatalf("without windows: want n1 started at once and no waiting, got %v %v", w.written, w.events)
	}
}

// An abort while waiting ends the wait: the record no longer says it waits.
func TestWindows_AbortWhileWaiting(t *testing.T) {
	w := newWindowRun(t, &sluicev1.Strategy{MaxParallel: "1", Windows: []string{"Mon 09:00-10:00"}}, "n1")
	w.decide(AbortRequested{R: &sluicev1.AbortRequest{Rollout: w.id, Reason: "not this week", By: "ops"}})
	if w.fin.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED || w.fin.GetWaiting() != "" || len(w.written) != 0 {
		t.Fatalf("want ABORTED, nothing waiting, nothing written; got %v, written %v", w.fin, w.written)
	}
}

// A freeze holds every wave start within it, whatever the windows; a wave
// in flight finishes; removing the freeze lets the next wave start; its
// end does too.
func TestFreeze_HoldsWaveStarts(t *testing.T) {
	freeze := func(id string, from, to time.Time) FreezeChanged {
		return FreezeChanged{ID: id, F: &sluicev1.Freeze{Id: id, From: timestamppb.New(from), To: timestamppb.New(to), Reason: "change freeze", By: "ops@laptop"}}
	}
	w := &windowRun{t: t, s: NewState(), now: t0, written: map[string]time.Time{}}
	r1 := testRev("aaaa1111")
	st := &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, WaveGrowth: 2}
	h := withStrategy(head(1, r1.Id, "10"), st)
	w.fp, w.id = targetOf(r1), rolloutID(h)
	f := freeze("xmas", t0.Add(-time.Hour), t0.Add(2*time.Hour)).F
	w.decide(Loaded{Head: h, HeadRev: r1, Presence: presence("n1", "n2", "n3"), Freezes: []*sluicev1.Freeze{f}})
	if len(w.written) != 0 || !strings.Contains(w.s.rollout.GetWaiting(), "frozen until") || !strings.Contains(w.s.rollout.GetWaiting(), "freeze xmas by ops@laptop") ||
		!w.s.rollout.GetWaitingUntil().AsTime().Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("under a freeze: written %v, waiting %q until %s", w.written, w.s.rollout.GetWaiting(), w.s.rollout.GetWaitingUntil().AsTime())
	}
	w.at(t0.Add(2 * time.Hour)) // the freeze ends
	if len(w.written) != 1 {
		t.Fatalf("after the freeze: want wave 1 started, got %v", w.written)
	}
	w.decide(freeze("late", w.now, w.now.Add(time.Hour))) // a freeze added while wave 1 runs
	w.provision("n1")
	if len(w.written) != 1 || !strings.Contains(w.s.rollout.GetWaiting(), "freeze late") {
		t.Fatalf("a freeze added mid-rollout: want wave 2 held, got %v, waiting %q", w.written, w.s.rollout.GetWaiting())
	}
	w.decide(FreezeChanged{ID: "late"}) // removed
	if len(w.written) != 3 || w.s.rollout.GetWaiting() != "" {
		t.Fatalf("freeze removed: want wave 2 started at once, got %v, waiting %q", w.written, w.s.rollout.GetWaiting())
	}
}

// A new term that finds the window open clears the waiting line the last
// term wrote, as the wave starts.
func TestWindows_ANewTermClearsTheLastTermsWaitingLine(t *testing.T) {
	w := newWindowRun(t, &sluicev1.Strategy{MaxParallel: "1", Windows: []string{"Mon 09:00-10:00"}}, "n1")
	rec := snapshot(w.s.rollout)
	if rec.GetWaiting() == "" {
		t.Fatal("the record before the takeover does not wait")
	}
	r1 := testRev("aaaa1111")
	n := &windowRun{t: t, s: NewState(), fp: w.fp, id: w.id, now: day(23, 9, 30), written: map[string]time.Time{}}
	n.decide(Loaded{Head: withStrategy(head(1, r1.Id, "1"), rec.GetStrategy()), HeadRev: r1, Active: rec, ActiveRev: r1, Presence: presence("n1")})
	if len(n.written) != 1 || n.s.rollout.GetWaiting() != "" || n.s.rollout.GetWaitingUntil() != nil {
		t.Fatalf("new term within the window: want n1 started and no waiting line, got %v, %q", n.written, n.s.rollout.GetWaiting())
	}
}
