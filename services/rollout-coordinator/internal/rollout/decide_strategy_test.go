package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// step is one event at an offset from t0.
type step struct {
	at time.Duration
	ev Event
}

// run feeds steps to a fresh state and returns the summarized actions of the last step.
func run(t *testing.T, steps []step) (*State, []string) {
	t.Helper()
	s := NewState()
	var last []string
	for _, st := range steps {
		last = summarize(Decide(s, st.ev, t0.Add(st.at)))
	}
	return s, last
}

func zoned(names ...string) []*sluicev1.NodePresence {
	var ps []*sluicev1.NodePresence
	for _, n := range names { // "b/n1" = node n1 in zone b
		zone, name, _ := strings.Cut(n, "/")
		ps = append(ps, &sluicev1.NodePresence{Node: name, Labels: map[string]string{"zone": "a", "dc": zone}})
	}
	return ps
}

func TestDecide_Strategies(t *testing.T) {
	r1 := testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(1, r1.Id, ""))
	strat := func(st *sluicev1.Strategy) Loaded {
		return Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: st}, HeadRev: r1,
			Presence: presence("n1", "n2", "n3", "n4", "n5", "n6", "n7")}
	}
	ok := func(n string) Event { return Status{S: status(n, provisioned, fp1, id1)} }
	ack := func(n string) Event { return Status{S: status(n, inProgress, fp1, id1)} }
	landed := func(n string) Event { return Written{Node: n, Fingerprint: fp1} }
	tests := []struct {
		name  string
		steps []step
		want  []string // actions of the last step
		check func(t *testing.T, s *State)
	}{
		{
			name:  "the first wave is the canary: only first_wave nodes start",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "10", FirstWave: 1})}},
			want:  []string{"start " + id1, "write n1", "emit RolloutStarted", "emit WaveStarted"},
		},
		{
			name: "the next wave waits for the last one to finish and grows by the factor",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, WaveGrowth: 2})},
				{time.Second, ok("n1")}},
			want: []string{"write n2", "write n3", "emit WaveStarted"},
		},
		{
			name: "bake time holds the next wave",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, BakeTime: durationpb.New(time.Minute)})},
				{time.Second, ok("n1")}},
			want: []string{"emit RolloutBaking"},
		},
		{
			name: "after the bake time the next wave starts",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, BakeTime: durationpb.New(time.Minute)})},
				{time.Second, ok("n1")}, {30 * time.Second, Tick{}}, {62 * time.Second, Tick{}}},
			want: []string{"write n2", "write n3", "emit WaveStarted"},
		},
		{
			name: "a failure domain is finished before the next starts",
			steps: []step{{0, Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "10", FailureDomain: "dc"}},
				HeadRev: r1, Presence: zoned("b/n1", "a/n2", "b/n3", "a/n4")}}},
			want: []string{"start " + id1, "write n2", "write n4", "emit RolloutStarted", "emit DomainStarted"},
		},
		{
			name: "the next failure domain starts when the first is done",
			steps: []step{{0, Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: &sluicev1.Strategy{MaxParallel: "10", FailureDomain: "dc"}},
				HeadRev: r1, Presence: zoned("b/n1", "a/n2", "b/n3", "a/n4")}}, {time.Second, ok("n2")}, {time.Second, ok("n4")}},
			want: []string{"write n1", "write n3", "emit DomainStarted"},
		},
		{
			name:  "a node that never acknowledges times out after the pickup deadline",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", FailureBudget: "5", PickupDeadline: durationpb.New(time.Minute)})}, {0, landed("n1")}, {61 * time.Second, Tick{}}},
			want:  []string{"write n1", "emit NodeOperationCancelled", "record n1", "write n2", "emit NodeTimedOut", "emit FingerprintInvalid"},
		},
		{
			// The write itself was held up (a server restart, a slow cluster):
			// that is the control plane's delay, not the node's.
			name: "the pickup deadline counts from when the write landed, not from the decision",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", FailureBudget: "5", PickupDeadline: durationpb.New(time.Minute)})},
				{50 * time.Second, landed("n1")}, {61 * time.Second, Tick{}}, {100 * time.Second, Tick{}}},
			want: nil,
		},
		{
			name:  "the apply deadline counts from the acknowledgement, not from the write",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", FailureBudget: "5", ApplyDeadline: durationpb.New(time.Minute)})}, {50 * time.Second, ack("n1")}, {100 * time.Second, Tick{}}},
			want:  nil,
		},
		{
			name:  "an acknowledged node times out after the apply deadline",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", FailureBudget: "5", ApplyDeadline: durationpb.New(time.Minute)})}, {50 * time.Second, ack("n1")}, {111 * time.Second, Tick{}}},
			want:  []string{"write n1", "emit NodeOperationCancelled", "record n1", "write n2", "emit NodeTimedOut", "emit FingerprintInvalid"},
		},
		{
			name:  "a timeout over budget reverts",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", PickupDeadline: durationpb.New(time.Minute)})}, {0, landed("n1")}, {61 * time.Second, Tick{}}},
			want:  []string{"write n1", "emit NodeOperationCancelled", "record n1", "write n1", "emit NodeRevertTarget", "emit NodeTimedOut", "emit FingerprintInvalid", "emit RolloutReverting"},
		},
		{
			// Its desired config is the node's backup: the config it should
			// run however late its agent gets to it (chaos seed 82: its
			// acknowledgement was held up by a stream leader's election).
			name: "a revert that misses its deadline is not cancelled; the rollout stops waiting for it",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", PickupDeadline: durationpb.New(time.Minute)})}, {0, landed("n1")},
				{time.Second, Status{S: status("n1", invalid, fp1, id1)}}, {2 * time.Second, Written{Node: "n1", Fingerprint: emptyFP}},
				{63 * time.Second, Tick{}}},
			want: []string{"finish RolledBack", "emit NodeRevertFailed", "emit RolloutRolledBack"},
			check: func(t *testing.T, s *State) {
				if d := s.nodes["n1"].desired; !d.GetRevert() || d.GetCancel() {
					t.Fatalf("n1's desired config must stay its revert, not cancelled: %v", d)
				}
			},
		},
		{
			name: "the progress deadline ends the rollout",
			steps: []step{{0, strat(&sluicev1.Strategy{MaxParallel: "1", ProgressDeadline: durationpb.New(time.Minute)})},
				{61 * time.Second, Tick{}}},
			want: []string{"finish Aborted", "emit RolloutAborted"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, got := run(t, tc.steps)
			if !slices.Equal(got, tc.want) {
				t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// A coordinator that was down longer than the apply deadline must not time
// out a node that is still applying: a new term restarts the clocks.
func TestDecide_TimeWithoutALeaderDoesNotCount(t *testing.T) {
	r1 := testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(1, r1.Id, ""))
	st := &sluicev1.Strategy{MaxParallel: "1", ApplyDeadline: durationpb.New(time.Minute), ProgressDeadline: durationpb.New(10 * time.Minute)}
	active := &sluicev1.Rollout{Id: id1, Revision: r1.Id, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Strategy: st, LeaderTime: durationpb.New(8 * time.Minute)}
	s := NewState()
	// The new leader loads an hour after the write: n1 is acknowledged and still applying.
	Decide(s, Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: st}, HeadRev: r1,
		Active: active, ActiveRev: r1, Presence: presence("n1", "n2"),
		Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1}},
		Status:  []*sluicev1.NodeStatus{status("n1", inProgress, fp1, id1)}}, t0.Add(time.Hour))
	if got := summarize(Decide(s, Tick{}, t0.Add(time.Hour+30*time.Second))); len(got) != 0 {
		t.Fatalf("30s into the new term: %v; want nothing (the deadline restarted)", got)
	}
	if got := summarize(Decide(s, Tick{}, t0.Add(time.Hour+61*time.Second))); !slices.Contains(got, "emit NodeTimedOut") {
		t.Fatalf("61s into the new term: %v; want n1 timed out", got)
	}
	// The progress deadline counts the 8 minutes already run plus this term.
	if got := summarize(Decide(s, Tick{}, t0.Add(time.Hour+2*time.Minute+time.Second))); !slices.Contains(got, "finish Aborted") {
		t.Fatalf("8m+2m01s of leader time: %v; want the progress deadline to end it", got)
	}
}
