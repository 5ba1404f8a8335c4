package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestDecide_BakeChecks: with strategy.bakeChecks the next wave waits, after
// the bake's time, until every node provisioned in the wave has passed its
// re-run checks that many times; a failed re-run fails the node like a
// failed apply. Without bakeChecks the bake is time only.
func TestDecide_BakeChecks(t *testing.T) {
	strat := func(checks uint32) Loaded {
		st := &sluicev1.Strategy{MaxParallel: "10", FirstWave: 1, BakeTime: durationpb.New(time.Minute), BakeChecks: checks}
		return Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: st}, HeadRev: r1, Presence: presence("n1", "n2", "n3")}
	}
	passed := func(n string, k uint32) Event {
		st := status(n, provisioned, fp1, id1)
		st.BakePasses = k
		return Status{S: st}
	}
	rerunFailed := func(n string) Event {
		st := status(n, invalid, fp1, id1)
		st.FailedCheck, st.CheckOutput, st.Message = "ping", "100% packet loss", "ping failed: exit status 1; restored last-good"
		return Status{S: st}
	}
	tests := []struct {
		name       string
		steps      []step
		want       []string // actions of the last step
		wantCounts string
		wantLeast  uint32 // the record's bakeChecksPassed
	}{
		{
			name:  "without bake checks the bake is time only",
			steps: []step{{0, strat(0)}, {time.Second, passed("n1", 0)}, {62 * time.Second, Tick{}}},
			want:  []string{"write n2", "write n3", "emit WaveStarted"},
		},
		{
			name:       "the bake's time over, the next wave waits for the re-runs",
			steps:      []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {62 * time.Second, Tick{}}},
			want:       []string{"emit RolloutWaitingForBakeChecks"},
			wantCounts: "total=3 pending=2 inprogress=0 provisioned=1 failed=0 skipped=0",
		},
		{
			name:      "one pass of two: still waiting, said once",
			steps:     []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {62 * time.Second, Tick{}}, {63 * time.Second, passed("n1", 1)}},
			want:      nil,
			wantLeast: 1,
		},
		{
			name: "the passes reached after the bake's time: the next wave starts",
			steps: []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {62 * time.Second, Tick{}}, {63 * time.Second, passed("n1", 1)},
				{93 * time.Second, passed("n1", 2)}},
			want:      []string{"write n2", "write n3", "emit WaveStarted"},
			wantLeast: 2, // the new wave has no provisioned node yet
		},
		{
			name:      "the passes reached before the bake's time: the bake's time still holds",
			steps:     []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {20 * time.Second, passed("n1", 1)}, {40 * time.Second, passed("n1", 2)}},
			want:      nil,
			wantLeast: 2,
		},
		{
			name: "the passes reached before the bake's time: the wave starts when it is over",
			steps: []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {20 * time.Second, passed("n1", 1)}, {40 * time.Second, passed("n1", 2)},
				{62 * time.Second, Tick{}}},
			want:      []string{"write n2", "write n3", "emit WaveStarted"},
			wantLeast: 2,
		},
		{
			// Chaos seed 181: waiting for it held the stage until the
			// progress deadline, and the rollout ended ABORTED.
			name: "a provisioned node of the stage that left no longer counts: the next wave starts",
			steps: []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {62 * time.Second, Tick{}},
				{63 * time.Second, Presence{Node: "n1"}}},
			want:      []string{"write n2", "write n3", "emit WaveStarted"},
			wantLeast: 2, // no provisioned node present in the stage
		},
		{
			name: "a node of the stage that left and came back counts again: the next wave waits for it",
			steps: []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {10 * time.Second, Presence{Node: "n1"}},
				{20 * time.Second, Presence{Node: "n1", P: presence("n1")[0]}}, {20 * time.Second, DesiredRead{Node: "n1", P: presence("n1")[0]}},
				{62 * time.Second, Tick{}}},
			want:       []string{"emit RolloutWaitingForBakeChecks"},
			wantCounts: "total=3 pending=2 inprogress=0 provisioned=1 failed=0 skipped=0",
		},
		{
			name:       "a failed re-run while baking fails the node as a failed apply: recorded, over budget, reverted",
			steps:      []step{{0, strat(2)}, {time.Second, passed("n1", 0)}, {20 * time.Second, passed("n1", 1)}, {30 * time.Second, rerunFailed("n1")}},
			want:       []string{"record n1", "write n1", "emit NodeRevertTarget", "emit NodeFailed", "emit FingerprintInvalid", "emit RolloutReverting"},
			wantCounts: "total=3 pending=0 inprogress=0 provisioned=0 failed=1 skipped=0 timedout=0 reverting=1 reverted=0",
			wantLeast:  2, // no provisioned node left in the stage
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, got := run(t, tc.steps)
			if !slices.Equal(got, tc.want) {
				t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
			}
			if tc.wantCounts != "" && counts(s) != tc.wantCounts {
				t.Errorf("counts:\n got  %s\n want %s", counts(s), tc.wantCounts)
			}
			if got := s.rollout.GetBakeChecksPassed(); got != tc.wantLeast {
				t.Errorf("record's bakeChecksPassed %d, want %d", got, tc.wantLeast)
			}
		})
	}
}

// The desired config of a node started under bake checks tells its agent
// what to re-run: how many passes, how often, and for how long at least.
func TestDecide_BakeChecks_TheWriteAsksTheAgentToReRun(t *testing.T) {
	st := &sluicev1.Strategy{FirstWave: 1, BakeTime: durationpb.New(time.Minute), BakeChecks: 3, BakeCheckInterval: durationpb.New(10 * time.Second)}
	acts := Decide(NewState(), Loaded{Head: &sluicev1.Head{Revision: r1.Id, Generation: 1, Strategy: st}, HeadRev: r1, Presence: presence("n1", "n2")}, t0)
	for _, a := range acts {
		if w, ok := a.(WriteDesired); ok {
			b := w.Desired.GetBakeChecks()
			if b.GetPasses() != 3 || b.GetInterval().AsDuration() != 10*time.Second || b.GetFor().AsDuration() != time.Minute {
				t.Fatalf("desired config's bakeChecks %v, want 3 passes every 10s for at least 1m", b)
			}
			return
		}
	}
	t.Fatalf("no desired config written: %v", summarize(acts))
}
