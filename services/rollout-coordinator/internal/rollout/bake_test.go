package rollout

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// bakeTerm drives the decider as the loop would, keeping what it stored —
// the rollout record, the desired configs — and the operators' requests,
// so that a takeover loads a new term from the store alone.
type bakeTerm struct {
	t        *testing.T
	s        *State
	head     *sluicev1.Head
	rec      *sluicev1.Rollout
	desired  map[string]*sluicev1.DesiredConfig
	statuses map[string]*sluicev1.NodeStatus
	pause    *sluicev1.PauseRequest   // control/pause
	rpause   []*sluicev1.PauseRequest // control/pause.<rollout>
	freezes  []*sluicev1.Freeze
	term     uint64
}

// bakeFleet starts, at t0, a rollout of r1 over n1..n3: a first wave of
// one, then the rest, a minute's bake between.
func bakeFleet(t *testing.T) *bakeTerm {
	b := &bakeTerm{t: t, desired: map[string]*sluicev1.DesiredConfig{}, statuses: map[string]*sluicev1.NodeStatus{},
		head: &sluicev1.Head{Revision: r1.Id, Generation: 1,
			Strategy: &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, BakeTime: durationpb.New(time.Minute)}}}
	b.takeover(0)
	return b
}

// at feeds ev at t0+d and keeps what the actions store.
func (b *bakeTerm) at(d time.Duration, ev Event) []string {
	acts := Decide(b.s, ev, t0.Add(d))
	for _, a := range acts {
		switch a := a.(type) {
		case StartRollout:
			b.rec = a.Rollout
		case SaveRollout:
			b.rec = a.Rollout
		case FinishRollout:
			if a.Rollout != nil {
				b.rec = a.Rollout
			}
		case WriteDesired:
			b.desired[a.Desired.GetNode()] = a.Desired
		}
	}
	return summarize(acts)
}

// provisioned reports n Provisioned on r1 at t0+d.
func (b *bakeTerm) provisioned(d time.Duration, n string) []string {
	st := status(n, provisioned, fp1, id1)
	b.statuses[n] = st
	return b.at(d, Status{S: st})
}

func (b *bakeTerm) pauseRollout(d time.Duration, gen uint64, paused bool) []string {
	req := &sluicev1.PauseRequest{Rollout: id1, Paused: paused, Generation: gen, By: "ops"}
	b.rpause = []*sluicev1.PauseRequest{req}
	return b.at(d, RolloutPauseChanged{R: req})
}

// takeover starts a new term at t0+d from what is stored.
func (b *bakeTerm) takeover(d time.Duration) []string {
	b.term++
	b.s = NewState()
	l := Loaded{Head: b.head, HeadRev: r1, Presence: presence("n1", "n2", "n3"), Pause: b.pause,
		RolloutPauses: b.rpause, Freezes: b.freezes, Term: b.term}
	if b.rec != nil {
		l.Active, l.ActiveRev, l.HeadRollout = proto.Clone(b.rec).(*sluicev1.Rollout), r1, proto.Clone(b.rec).(*sluicev1.Rollout)
	}
	for _, n := range slices.Sorted(maps.Keys(b.desired)) {
		l.Desired = append(l.Desired, b.desired[n])
		if st := b.statuses[n]; st != nil {
			l.Status = append(l.Status, st)
		}
	}
	return b.at(d, l)
}

// wave2 reports whether acts start the second wave.
func wave2(acts []string) bool { return slices.Contains(acts, "write n2") }

// expectWave2 checks that wave 2 starts at t0+d, not a second before.
func (b *bakeTerm) expectWave2(d time.Duration) {
	b.t.Helper()
	if got := b.at(d-time.Second, Tick{}); wave2(got) {
		b.t.Fatalf("wave 2 started at %s: %v; want it at %s", d-time.Second, got, d)
	}
	if got := b.at(d, Tick{}); !wave2(got) {
		b.t.Fatalf("at %s: %v; want wave 2 started (record: bakeUntil %v, bakeLeft %v)", d, got,
			b.rec.GetBakeUntil().AsTime(), b.rec.GetBakeLeft().AsDuration())
	}
}

// TestBake_AcrossTakeoversAndPauses: the bake's countdown is the record's
// (bake.go). n1, wave 1, is provisioned at 1s: its bake runs until 61s.
func TestBake_AcrossTakeoversAndPauses(t *testing.T) {
	tests := []struct {
		name string
		// given runs after n1's bake started; wave 2 must start at want.
		given func(b *bakeTerm)
		want  time.Duration
	}{
		{
			name:  "untouched, wave 2 starts when the bake's minute is over",
			given: func(b *bakeTerm) {},
			want:  61 * time.Second,
		},
		{
			name: "a takeover mid-bake continues the countdown rather than starting over",
			given: func(b *bakeTerm) {
				if got := b.takeover(30 * time.Second); wave2(got) || slices.Contains(got, "emit RolloutBaking") {
					b.t.Fatalf("takeover: %v; want no wave 2 and no new bake", got)
				}
				if u := b.rec.GetBakeUntil(); u == nil || !u.AsTime().Equal(t0.Add(61*time.Second)) {
					b.t.Fatalf("record's bakeUntil after the takeover %v, want the first term's, t0+61s", u)
				}
			},
			want: 61 * time.Second,
		},
		{
			name: "a rollout's pause mid-bake holds the countdown; resume runs the 40s left",
			given: func(b *bakeTerm) {
				if got := b.pauseRollout(21*time.Second, 1, true); !slices.Contains(got, "emit RolloutBakeHeld") {
					b.t.Fatalf("pause: %v; want RolloutBakeHeld", got)
				}
				if got := b.at(5*time.Minute, Tick{}); wave2(got) {
					b.t.Fatalf("wave 2 started while paused: %v", got)
				}
				if b.rec.GetBakeUntil() != nil || b.rec.GetBakeLeft().AsDuration() != 40*time.Second {
					b.t.Fatalf("record while held: bakeUntil %v, bakeLeft %v; want none, 40s", b.rec.GetBakeUntil(), b.rec.GetBakeLeft())
				}
				if got := b.pauseRollout(10*time.Minute, 2, false); wave2(got) || !slices.Contains(got, "emit RolloutBakeResumed") {
					b.t.Fatalf("resume: %v; want RolloutBakeResumed, no wave 2 yet", got)
				}
			},
			want: 10*time.Minute + 40*time.Second,
		},
		{
			name: "the control plane's pause holds it as well",
			given: func(b *bakeTerm) {
				b.pause = paused(1, "")
				b.at(21*time.Second, PauseChanged{R: b.pause})
				if got := b.at(5*time.Minute, Tick{}); wave2(got) {
					b.t.Fatalf("wave 2 started while paused: %v", got)
				}
				b.pause = resumed(2)
				if got := b.at(10*time.Minute, PauseChanged{R: b.pause}); wave2(got) {
					b.t.Fatalf("resume: %v; want the bake's 40s first", got)
				}
			},
			want: 10*time.Minute + 40*time.Second,
		},
		{
			name: "a takeover while held keeps it held; resume runs what was left",
			given: func(b *bakeTerm) {
				b.pauseRollout(21*time.Second, 1, true)
				if got := b.takeover(5 * time.Minute); wave2(got) {
					b.t.Fatalf("takeover while paused: %v; want no wave 2", got)
				}
				if b.s.bakeLeft != 40*time.Second || b.rec.GetBakeLeft().AsDuration() != 40*time.Second {
					b.t.Fatalf("after the takeover: bakeLeft %s, record's %v; want 40s", b.s.bakeLeft, b.rec.GetBakeLeft())
				}
				if got := b.pauseRollout(10*time.Minute, 2, false); wave2(got) {
					b.t.Fatalf("resume: %v; want the bake's 40s first", got)
				}
			},
			want: 10*time.Minute + 40*time.Second,
		},
		{
			name: "a pause lifted while no coordinator led: the new term resumes the bake with what was left",
			given: func(b *bakeTerm) {
				b.pauseRollout(21*time.Second, 1, true)
				b.rpause = []*sluicev1.PauseRequest{{Rollout: id1, Paused: false, Generation: 2, By: "ops"}}
				if got := b.takeover(5 * time.Minute); wave2(got) || !slices.Contains(got, "emit RolloutBakeResumed") {
					b.t.Fatalf("takeover: %v; want the bake resumed, no wave 2", got)
				}
			},
			want: 5*time.Minute + 40*time.Second,
		},
		{
			name: "a bake over while a freeze holds wave 2: a takeover does not bake again",
			given: func(b *bakeTerm) {
				f := &sluicev1.Freeze{Id: "f1", From: timestamppb.New(t0.Add(50 * time.Second)), To: timestamppb.New(t0.Add(100 * time.Second)), By: "ops"}
				b.freezes = []*sluicev1.Freeze{f}
				b.at(50*time.Second, FreezeChanged{ID: "f1", F: f})
				if got := b.at(61*time.Second, Tick{}); wave2(got) || !b.rec.GetBaked() {
					b.t.Fatalf("at 61s: %v, record's baked %v; want the bake over and wave 2 frozen", got, b.rec.GetBaked())
				}
				if got := b.takeover(70 * time.Second); slices.Contains(got, "emit RolloutBaking") {
					b.t.Fatalf("takeover: %v; want no second bake", got)
				}
			},
			want: 100 * time.Second,
		},
		{
			name: "a bake whose time ran out while no coordinator led is over",
			given: func(b *bakeTerm) {
				if got := b.takeover(90 * time.Second); !wave2(got) {
					b.t.Fatalf("takeover after the bake's time: %v; want wave 2 at once", got)
				}
			},
			want: -1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := bakeFleet(t)
			if got := b.provisioned(time.Second, "n1"); !slices.Contains(got, "emit RolloutBaking") {
				t.Fatalf("n1 provisioned: %v; want the bake started", got)
			}
			tc.given(b)
			if tc.want > 0 {
				b.expectWave2(tc.want)
			}
		})
	}
}
