package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestDecide_MaxUnprovenDomains: a failure-domain stage takes up to
// maxUnprovenDomains values of the label; a value outside it waits until
// every node of the stage has an outcome and the bake passed. Both sides of
// the limit.
func TestDecide_MaxUnprovenDomains(t *testing.T) {
	// Zones a, b, c with two nodes each; maxParallel never the limit.
	fleet := zoned("a/a1", "a/a2", "b/b1", "b/b2", "c/c1", "c/c2")
	start := func(limit uint32, bake time.Duration) Loaded {
		st := &sluicev1.Strategy{MaxParallel: "10", FailureDomain: "dc", MaxUnprovenDomains: limit}
		if bake > 0 {
			st.BakeTime = durationpb.New(bake)
		}
		return Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: st}, HeadRev: r1, Presence: fleet}
	}
	ok := func(n string) Event { return Status{S: status(n, provisioned, fp1, id1)} }
	tests := []struct {
		name        string
		steps       []step
		want        []string // actions of the last step
		wantDomains []string // the record's domains after it
		wantWaiting []string // nodes still pending after it
	}{
		{
			name:        "unset: one zone at a time, as before the limit existed",
			steps:       []step{{0, start(0, 0)}},
			want:        []string{"start " + id1, "write a1", "write a2", "emit RolloutStarted", "emit DomainStarted"},
			wantDomains: []string{"0a"}, wantWaiting: []string{"b1", "b2", "c1", "c2"},
		},
		{
			name:        "1 is the default",
			steps:       []step{{0, start(1, 0)}},
			want:        []string{"start " + id1, "write a1", "write a2", "emit RolloutStarted", "emit DomainStarted"},
			wantDomains: []string{"0a"}, wantWaiting: []string{"b1", "b2", "c1", "c2"},
		},
		{
			name:  "2: two zones start together, the third waits",
			steps: []step{{0, start(2, 0)}},
			want: []string{"start " + id1, "write a1", "write a2", "write b1", "write b2",
				"emit RolloutStarted", "emit DomainStarted", "emit DomainStarted"},
			wantDomains: []string{"0a", "0b"}, wantWaiting: []string{"c1", "c2"},
		},
		{
			name:  "3 with three zones: every zone starts",
			steps: []step{{0, start(3, 0)}},
			want: []string{"start " + id1, "write a1", "write a2", "write b1", "write b2", "write c1", "write c2",
				"emit RolloutStarted", "emit DomainStarted", "emit DomainStarted", "emit DomainStarted"},
			wantDomains: []string{"0a", "0b", "0c"}, wantWaiting: nil,
		},
		{
			// Zone a is proven, but the stage is a and b: c waits for b.
			name:        "2: a zone done while the other of its stage runs does not let the third in",
			steps:       []step{{0, start(2, 0)}, {time.Second, ok("a1")}, {time.Second, ok("a2")}},
			want:        nil,
			wantDomains: []string{"0a", "0b"}, wantWaiting: []string{"c1", "c2"},
		},
		{
			name:        "2: the third zone starts once both of the stage are done",
			steps:       []step{{0, start(2, 0)}, {time.Second, ok("a1")}, {time.Second, ok("a2")}, {time.Second, ok("b1")}, {time.Second, ok("b2")}},
			want:        []string{"write c1", "write c2", "emit DomainStarted"},
			wantDomains: []string{"0c"}, wantWaiting: nil,
		},
		{
			name: "2 with a bake: the stage's nodes are unproven until the bake passed",
			steps: []step{{0, start(2, time.Minute)}, {time.Second, ok("a1")}, {time.Second, ok("a2")}, {time.Second, ok("b1")},
				{time.Second, ok("b2")}, {30 * time.Second, Tick{}}},
			want:        nil,
			wantDomains: []string{"0a", "0b"}, wantWaiting: []string{"c1", "c2"},
		},
		{
			name: "2 with a bake: after it the next stage starts",
			steps: []step{{0, start(2, time.Minute)}, {time.Second, ok("a1")}, {time.Second, ok("a2")}, {time.Second, ok("b1")},
				{time.Second, ok("b2")}, {62 * time.Second, Tick{}}},
			want:        []string{"write c1", "write c2", "emit DomainStarted"},
			wantDomains: []string{"0c"}, wantWaiting: nil,
		},
		{
			// Wave 1 (a1, a2, b1) ends inside zone b; wave 2 starts a new
			// stage with b2, then takes c: b is not started again.
			name: "2 with waves: a zone carried over a wave boundary is not started again",
			steps: []step{{0, Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "10",
				FailureDomain: "dc", MaxUnprovenDomains: 2, FirstWave: 3, WaveGrowth: 2}}, HeadRev: r1, Presence: fleet}},
				{time.Second, ok("a1")}, {time.Second, ok("a2")}, {time.Second, ok("b1")}},
			want:        []string{"write b2", "write c1", "write c2", "emit WaveStarted", "emit DomainStarted"},
			wantDomains: []string{"0b", "0c"}, wantWaiting: nil,
		},
		{
			// Before the limit a node joining in a value sorted before the
			// one in progress started at once: two values unproven.
			name: "1: a node joining in another zone waits for the stage, whatever its zone sorts as",
			steps: []step{{0, Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "10", FailureDomain: "dc"}},
				HeadRev: r1, Presence: zoned("b/b1", "b/b2")}}, {time.Second, Presence{Node: "a1", P: zoned("a/a1")[0]}}},
			want:        []string{"emit NodeJoinedRollout"},
			wantDomains: []string{"0b"}, wantWaiting: []string{"a1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, got := run(t, tc.steps)
			if !slices.Equal(got, tc.want) {
				t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
			}
			if d := s.rollout.GetDomains(); !slices.Equal(d, tc.wantDomains) {
				t.Errorf("record's domains %q, want %q", d, tc.wantDomains)
			}
			var waiting []string
			for _, n := range s.pending.sorted() {
				waiting = append(waiting, n.name)
			}
			if !slices.Equal(waiting, tc.wantWaiting) {
				t.Errorf("pending %q, want %q", waiting, tc.wantWaiting)
			}
		})
	}
}

// TestDecide_Takeover_StageInProgress: after a takeover the stage in
// progress is judged by its time only (docs/rollouts.md): a new term that
// finds zone a's nodes provisioned by this rollout bakes before zone b; one
// that finds no node of the rollout started (the last term wrote the record
// that opened zone a's stage and was deposed before its desired writes)
// has nothing to bake and starts zone a at once. The chaos suite's Bake
// check relies on both sides (docs/chaos.md, "Bake").
func TestDecide_Takeover_StageInProgress(t *testing.T) {
	fleet := zoned("a/a1", "a/a2", "b/b1", "b/b2")
	h := &sluicev1.Head{Revision: r1.Id, Generation: 1,
		Strategy: &sluicev1.Strategy{MaxParallel: "10", FailureDomain: "dc", BakeTime: durationpb.New(time.Minute)}}
	first, got := run(t, []step{{0, Loaded{Head: h, HeadRev: r1, Presence: fleet}}})
	if !slices.Contains(got, "write a1") || len(first.rollout.GetStages()) != 1 {
		t.Fatalf("term 1: actions %v, stages %v; want zone a's stage opened and a1 written", got, first.rollout.GetStages())
	}
	rec := snapshot(first.rollout)
	wrote := func(n string) *sluicev1.DesiredConfig {
		return &sluicev1.DesiredConfig{Node: n, Fingerprint: fp1, Rollout: id1, Revision: r1.Id, Config: render0(r1)}
	}
	takeover := func(desired []*sluicev1.DesiredConfig, statuses []*sluicev1.NodeStatus) Event {
		return Loaded{Head: h, HeadRev: r1, Presence: fleet, Active: snapshot(rec), ActiveRev: r1, Desired: desired, Status: statuses, Term: 2}
	}
	t.Run("zone a provisioned: the new term bakes before zone b", func(t *testing.T) {
		ev := takeover([]*sluicev1.DesiredConfig{wrote("a1"), wrote("a2")},
			[]*sluicev1.NodeStatus{status("a1", provisioned, fp1, id1), status("a2", provisioned, fp1, id1)})
		s, got := run(t, []step{{2 * time.Second, ev}})
		if slices.Contains(got, "write b1") || !slices.Contains(got, "emit RolloutBaking") {
			t.Fatalf("actions %v: want a bake and no write of zone b", got)
		}
		got = summarize(Decide(s, Tick{}, t0.Add(63*time.Second)))
		if !slices.Contains(got, "write b1") {
			t.Fatalf("actions after the bake %v: want zone b started", got)
		}
	})
	t.Run("zone a's nodes left while no coordinator led: skipped, and the new term bakes before zone b", func(t *testing.T) {
		ev := takeover([]*sluicev1.DesiredConfig{wrote("a1"), wrote("a2")}, nil)
		l := ev.(Loaded)
		l.Presence = zoned("b/b1", "b/b2")
		s, got := run(t, []step{{2 * time.Second, l}})
		if slices.Contains(got, "write b1") || !slices.Contains(got, "emit RolloutBaking") {
			t.Fatalf("actions %v: want a bake and no write of zone b (zone a's stage started two nodes)", got)
		}
		r := s.rollout
		if c := r.GetCounts(); c.GetTotal() != 4 || c.GetSkipped() != 2 {
			t.Fatalf("counts %v: want the 4 nodes counted, a1 and a2 skipped", c)
		}
		var skipped []string
		for _, o := range r.GetSkipped() {
			skipped = append(skipped, o.GetNode())
		}
		if !slices.Equal(skipped, []string{"a1", "a2"}) {
			t.Fatalf("skipped %v, want a1 and a2 named", skipped)
		}
		got = summarize(Decide(s, Tick{}, t0.Add(63*time.Second)))
		if !slices.Contains(got, "write b1") {
			t.Fatalf("actions after the bake %v: want zone b started", got)
		}
	})
	t.Run("no node of zone a started: zone a starts at once", func(t *testing.T) {
		s, got := run(t, []step{{2 * time.Second, takeover(nil, nil)}})
		if !slices.Contains(got, "write a1") || !slices.Contains(got, "write a2") || slices.Contains(got, "emit RolloutBaking") {
			t.Fatalf("actions %v: want a1 and a2 written, no bake", got)
		}
		if d := s.rollout.GetDomains(); !slices.Equal(d, []string{"0a"}) {
			t.Fatalf("record's domains %q, want zone a", d)
		}
		// Term 1's stage stays in the record, ended with no node.
		if st := s.rollout.GetStages(); len(st) != 2 || st[0].GetNodes() != 0 || st[0].GetEndedAt() == nil {
			t.Fatalf("stages %v: want term 1's, ended with no node, then this term's", st)
		}
	})
}
