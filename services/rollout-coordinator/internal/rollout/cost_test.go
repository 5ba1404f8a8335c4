package rollout

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Cost per event (issue 20): a heartbeat that changes nothing, an agent's
// status report and a tick must cost Decide the same whatever the fleet's
// size and maxParallel. Allocations are deterministic, so the test compares
// them (testing.AllocsPerRun); time is only measured by the benchmarks
// below, never asserted.

// costRuns is how many events each measurement feeds: the rollout keeps
// enough nodes pending that every Provisioned report starts the next one.
const costRuns = 200

// costFleet is a state rolling a revision out over nodes present nodes,
// maxPar at a time, each node in flight written (Written) and acknowledged
// by its agent (Provisioning), so that every one of them is running. The
// events are built in advance, so that only Decide's cost is measured:
// beat[i] is a heartbeat-only presence update of the i-th node; done[i] the
// i-th node's Provisioned report (node i is in flight by then: each report
// starts the next pending node); ack[i] the acknowledgement of the i-th
// node those reports started; tick a Tick at which no deadline has passed;
// away the lease expiry and the return of a pending node from the middle
// of the queue, in turn (the second half of the fleet: none of the reports
// above starts them).
type costFleet struct {
	s                           *State
	beat, done, ack, tick, away []Event
	description                 string
}

func newCostFleet(tb testing.TB, nodes, maxPar, count int) *costFleet {
	tb.Helper()
	if nodes < maxPar+count+2 {
		tb.Fatalf("fleet of %d too small for maxParallel %d and %d events", nodes, maxPar, count)
	}
	r1 := testRev("aaaa1111")
	fp, id := targetOf(r1), rolloutID(head(1, r1.Id, strconv.Itoa(maxPar)))
	names := make([]string, nodes)
	ps := make([]*sluicev1.NodePresence, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("n%07d", i) // name order is start order
		ps[i] = &sluicev1.NodePresence{Node: names[i], Labels: map[string]string{"zone": "a"}}
	}
	s := NewState()
	Decide(s, Loaded{Head: head(1, r1.Id, strconv.Itoa(maxPar)), HeadRev: r1, Presence: ps}, t0)
	if got := s.inFlight.len(); got != maxPar {
		tb.Fatalf("in flight after load: %d, want %d", got, maxPar)
	}
	for i := range maxPar {
		Decide(s, Written{Node: names[i], Fingerprint: fp}, t0)
		Decide(s, Status{S: status(names[i], inProgress, fp, id)}, t0)
	}
	f := &costFleet{s: s, description: fmt.Sprintf("%d nodes, maxParallel %d", nodes, maxPar)}
	for i := range count {
		p := &sluicev1.NodePresence{Node: names[i], Labels: map[string]string{"zone": "a"}}
		f.beat = append(f.beat, Presence{Node: names[i], P: p})
		f.done = append(f.done, Status{S: status(names[i], provisioned, fp, id)})
		f.ack = append(f.ack, Status{S: status(names[maxPar+i], inProgress, fp, id)})
		f.tick = append(f.tick, Tick{})
	}
	for i := range min(count, nodes/2-1) {
		name := names[nodes/2+i]
		f.away = append(f.away, Presence{Node: name}, Presence{Node: name, P: &sluicev1.NodePresence{Node: name, Labels: map[string]string{"zone": "a"}}})
	}
	return f
}

// pause pauses the control plane.
func (f *costFleet) pause() {
	Decide(f.s, PauseChanged{R: &sluicev1.PauseRequest{Paused: true, Generation: 1}}, t0)
}

// cost is Decide's allocations per event, counted by testing.AllocsPerRun
// on the first half of evs, and the bytes it allocates per event on the
// second half (the same count of heap bytes, which shows work that grows
// where the number of allocations only grows by its logarithm, like an
// appended slice).
func (f *costFleet) cost(evs []Event) (allocs, bytes float64) {
	half := len(evs) / 2
	i := 0
	allocs = testing.AllocsPerRun(half-1, func() { // AllocsPerRun calls it runs+1 times
		Decide(f.s, evs[i], t0)
		i++
	})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, ev := range evs[half:] {
		Decide(f.s, ev, t0)
	}
	runtime.ReadMemStats(&after)
	return allocs, float64(after.TotalAlloc-before.TotalAlloc) / float64(len(evs)-half)
}

// TestDecide_CostPerEventDoesNotGrowWithFleetOrMaxParallel compares what
// Decide allocates on a heartbeat-only presence update, on status reports
// and on a tick at maxParallel 10 and 1,000 (10,000 nodes) and at 1,000
// and 100,000 nodes (maxParallel 10): the same within 2x, in allocations
// and in bytes. (A tick that collected and sorted the nodes in flight to
// find the late ones allocated 16 KB per tick at maxParallel 1,000.)
func TestDecide_CostPerEventDoesNotGrowWithFleetOrMaxParallel(t *testing.T) {
	pairs := []struct{ small, large [2]int }{
		{small: [2]int{10_000, 10}, large: [2]int{10_000, 1_000}},
		{small: [2]int{1_000, 10}, large: [2]int{100_000, 10}},
	}
	kinds := []struct {
		name   string
		events func(t *testing.T, f *costFleet) []Event
	}{
		{"heartbeat-only presence", func(_ *testing.T, f *costFleet) []Event { return f.beat }},
		{"status Provisioned (starts the next node)", func(_ *testing.T, f *costFleet) []Event { return f.done }},
		{"status Provisioning", func(_ *testing.T, f *costFleet) []Event { return f.ack }}, // of the nodes the reports started
		{"tick, no deadline passed", func(_ *testing.T, f *costFleet) []Event { return f.tick }},
		// Last: the agents of the nodes in flight keep running (they did
		// not reach the pause), so the coordinator waits for them, and every
		// heartbeat would ask which ones it waits for.
		{"heartbeat-only presence while the control plane pauses", func(t *testing.T, f *costFleet) []Event {
			f.pause()
			if f.s.ack.GetWaitingFor() == "" {
				t.Fatalf("%s: the pause is reached at once: nothing in flight to wait for", f.description)
			}
			return f.beat
		}},
	}
	within := func(a, b, floor float64) bool { return b <= 2*max(a, floor) && a <= 2*max(b, floor) }
	for _, p := range pairs {
		small, large := newCostFleet(t, p.small[0], p.small[1], 2*costRuns), newCostFleet(t, p.large[0], p.large[1], 2*costRuns)
		for _, k := range kinds {
			a, ab := small.cost(k.events(t, small))
			b, bb := large.cost(k.events(t, large))
			t.Logf("%s: %.1f allocs, %.0f B per event at %s; %.1f allocs, %.0f B at %s",
				k.name, a, ab, small.description, b, bb, large.description)
			if !within(a, b, 1) || !within(ab, bb, 64) {
				t.Errorf("%s: %.1f allocs (%.0f B) per event at %s but %.1f allocs (%.0f B) at %s: the cost grows",
					k.name, a, ab, small.description, b, bb, large.description)
			}
		}
	}
}

// BenchmarkDecide reports the time and allocations of Decide per event at
// each size; compare across sizes with benchstat (never asserted).
//
//	go test -run '^$' -bench BenchmarkDecide ./services/rollout-coordinator/internal/rollout/
func BenchmarkDecide(b *testing.B) {
	sizes := [][2]int{{1_000, 10}, {10_000, 10}, {10_000, 1_000}, {100_000, 10}, {100_000, 10_000}}
	for _, sz := range sizes {
		nodes, par := sz[0], sz[1]
		b.Run(fmt.Sprintf("heartbeat/nodes=%d/maxParallel=%d", nodes, par), func(b *testing.B) {
			f := newCostFleet(b, nodes, par, 2*costRuns)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				Decide(f.s, f.beat[i%len(f.beat)], t0)
				i++
			}
		})
		b.Run(fmt.Sprintf("heartbeat-paused/nodes=%d/maxParallel=%d", nodes, par), func(b *testing.B) {
			f := newCostFleet(b, nodes, par, 2*costRuns)
			f.pause()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				Decide(f.s, f.beat[i%len(f.beat)], t0)
				i++
			}
		})
		b.Run(fmt.Sprintf("tick/nodes=%d/maxParallel=%d", nodes, par), func(b *testing.B) {
			f := newCostFleet(b, nodes, par, 2*costRuns)
			b.ReportAllocs()
			for b.Loop() {
				Decide(f.s, Tick{}, t0)
			}
		})
		b.Run(fmt.Sprintf("pending-leaves-and-returns/nodes=%d/maxParallel=%d", nodes, par), func(b *testing.B) {
			// A pending node in the middle of the queue leaves, and comes
			// back: it is taken out of the queue, and put back in its place.
			f := newCostFleet(b, nodes, par, 2*costRuns)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				Decide(f.s, f.away[i%len(f.away)], t0)
				i++
			}
		})
		b.Run(fmt.Sprintf("status/nodes=%d/maxParallel=%d", nodes, par), func(b *testing.B) {
			// Each Provisioned report starts the next node: a fresh fleet
			// when the pending nodes run low, outside the timer.
			var f *costFleet
			next := 0
			b.ReportAllocs()
			for b.Loop() {
				if f == nil || next == len(f.done) {
					b.StopTimer()
					f, next = newCostFleet(b, nodes, par, min(nodes-par-2, 50_000)), 0
					b.StartTimer()
				}
				Decide(f.s, f.done[next], t0)
				next++
			}
		})
	}
}

// newRevertFleet is a state reverting a rollout that touched touched nodes
// (maxParallel 10, budget 0: the last node touched failed), half of them
// reverted already; reports[i] is the revert report of the i-th node still
// to revert (each report starts the next revert).
func newRevertFleet(tb testing.TB, touched, count int) (*State, []Event) {
	tb.Helper()
	const maxPar = 10
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp0, fp1 := targetOf(r0), targetOf(r1)
	id0, id1 := rolloutID(head(1, r0.Id, "")), rolloutID(head(2, r1.Id, strconv.Itoa(maxPar)))
	nodes := touched + maxPar
	names := make([]string, nodes)
	ld := Loaded{Head: withStrategy(head(2, r1.Id, strconv.Itoa(maxPar)), &sluicev1.Strategy{MaxParallel: strconv.Itoa(maxPar), FailureBudget: "0"}),
		HeadRev: r1, LastApplied: &sluicev1.RolloutRef{Rollout: id0, Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}
	cfg0 := render0(r0)
	for i := range names {
		names[i] = fmt.Sprintf("n%07d", i)
		ld.Presence = append(ld.Presence, &sluicev1.NodePresence{Node: names[i], Labels: map[string]string{"zone": "a"}})
		ld.Desired = append(ld.Desired, &sluicev1.DesiredConfig{Node: names[i], Fingerprint: fp0, Rollout: id0, Revision: r0.Id, Config: cfg0})
		ld.Status = append(ld.Status, status(names[i], provisioned, fp0, id0))
	}
	s := NewState()
	Decide(s, ld, t0)
	for i := range touched - 1 { // each report starts the next node
		Decide(s, Status{S: status(names[i], provisioned, fp1, id1)}, t0)
	}
	Decide(s, Status{S: status(names[touched-1], invalid, fp1, id1)}, t0) // over budget: the revert starts
	if !s.reverting {
		tb.Fatalf("%d touched: not reverting", touched)
	}
	// Every node started is reverted, by name: the first half now.
	for i := range touched / 2 {
		Decide(s, Status{S: status(names[i], provisioned, fp0, id1)}, t0)
	}
	if got := len(s.rollout.GetReverted()); got != touched/2 {
		tb.Fatalf("%d touched: %d reverted, want %d", touched, got, touched/2)
	}
	var reports []Event
	for i := touched / 2; i < touched/2+count; i++ {
		reports = append(reports, Status{S: status(names[i], provisioned, fp0, id1)})
	}
	return s, reports
}

// TestDecide_RevertReportCostDoesNotGrowWithTheNodesReverted: the record
// lists every node announced reverted, and each revert report must not
// cost the length of that list (to look a node up in it, or to copy it
// into the save of the record).
func TestDecide_RevertReportCostDoesNotGrowWithTheNodesReverted(t *testing.T) {
	small, se := newRevertFleet(t, 1_000, 2*costRuns)
	large, le := newRevertFleet(t, 20_000, 2*costRuns)
	a, ab := (&costFleet{s: small}).cost(se)
	b, bb := (&costFleet{s: large}).cost(le)
	t.Logf("revert report: %.1f allocs, %.0f B per event with 500 nodes reverted; %.1f allocs, %.0f B with 10,000", a, ab, b, bb)
	if b > 2*max(a, 1) || a > 2*max(b, 1) || bb > 2*max(ab, 64) || ab > 2*max(bb, 64) {
		t.Errorf("revert report: %.1f allocs (%.0f B) per event with 500 nodes reverted but %.1f allocs (%.0f B) with 10,000: the cost grows",
			a, ab, b, bb)
	}
}

// TestSnapshot_SharesOnlyWhatTheStateNeverChanges: a snapshot shares the
// reverted list and the ended stages with the state (copying them on every
// step cost the length of the rollout); what the state does next must not
// show in it.
func TestSnapshot_SharesOnlyWhatTheStateNeverChanges(t *testing.T) {
	s := &State{rollout: &sluicev1.Rollout{Id: "r", Counts: &sluicev1.RolloutCounts{}, Reverted: make([]string, 0, 8)}}
	r := s.rollout
	r.Reverted = append(r.Reverted, "n1", "n2")
	for i := range 3 {
		s.openStage(t0.Add(time.Duration(i) * time.Minute))
		if i < 2 {
			s.closeStage(t0.Add(time.Duration(i)*time.Minute + time.Second))
		}
	}
	snap := snapshot(r)
	want := proto.Clone(r).(*sluicev1.Rollout)
	// The state moves on: a node reverted, the open stage ended, a new one.
	r.Reverted = append(r.Reverted, "n3")
	r.Counts.Provisioned = 7
	s.started = 5
	s.closeStage(t0.Add(time.Hour))
	s.openStage(t0.Add(time.Hour))
	if !proto.Equal(snap, want) {
		t.Fatalf("the snapshot changed with the state:\n got %v\nwant %v", snap, want)
	}
}

// TestBusy_CountsAndNamesTheFirstThree: busy finds the first three names
// among the few at the top of the nodes in flight by name, with no pass
// over them all; what it says is what the sorted list said.
func TestBusy_CountsAndNamesTheFirstThree(t *testing.T) {
	tests := []struct {
		name  string
		given []string // in flight (a map: visited in any order)
		want  string
	}{
		{name: "none", want: ""},
		{name: "one", given: []string{"n1"}, want: "1 node operation(s) in flight ([n1])"},
		{name: "three", given: []string{"n3", "n1", "n2"}, want: "3 node operation(s) in flight ([n1 n2 n3])"},
		{name: "more: the first three by name", given: []string{"n5", "n9", "n2", "n7", "n1", "n8", "n3", "n4"},
			want: "8 node operation(s) in flight (n1, n2, n3, …)"},
		{name: "the smallest last", given: []string{"b", "c", "d", "e", "a"}, want: "5 node operation(s) in flight (a, b, c, …)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			for _, name := range tt.given {
				s.fly(&node{name: name})
			}
			if got := s.busy(false); got != tt.want {
				t.Errorf("busy = %q, want %q", got, tt.want)
			}
		})
	}
}
