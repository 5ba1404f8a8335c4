package view

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestRolloutTimeline_PlanAgainstActual(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(s) * time.Second)) }
	waves := &sluicev1.Strategy{MaxParallel: "10", FirstWave: 10, WaveGrowth: 2, BakeTime: durationpb.New(30 * time.Second)}
	canary := &sluicev1.Strategy{MaxParallel: "1", FirstWave: 1, WaveGrowth: 2, BakeTime: durationpb.New(25 * time.Second)} // waves of 1, 2, 2 nodes of 5
	cases := []struct {
		name  string
		given *sluicev1.Rollout
		now   int // seconds after t0
		want  func(t *testing.T, tl Timeline)
	}{
		{
			name: "waves planned 10, 20, 40, 30; wave 1 done in 20 s, wave 2 running",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: waves,
				StartedAt: at(0), LeaderTime: durationpb.New(60 * time.Second),
				Counts: &sluicev1.RolloutCounts{Total: 100, Provisioned: 20, InProgress: 10, Pending: 70, Attempted: 30},
				Stages: []*sluicev1.StageResult{
					{Wave: 1, StartedAt: at(0), EndedAt: at(20), Nodes: 10, Provisioned: 10},
					{Wave: 2, StartedAt: at(50), Nodes: 20, Provisioned: 10},
				}},
			now: 60,
			want: func(t *testing.T, tl Timeline) {
				if got := []int{tl.Plan[0].Nodes, tl.Plan[1].Nodes, tl.Plan[2].Nodes, tl.Plan[3].Nodes}; got[0] != 10 || got[1] != 20 || got[2] != 40 || got[3] != 30 {
					t.Errorf("plan %v, want waves of 10, 20, 40, 30", got)
				}
				if tl.Plan[0].State != "done" || tl.Plan[1].State != "running" || tl.Plan[2].State != "planned" {
					t.Errorf("states %s %s %s", tl.Plan[0].State, tl.Plan[1].State, tl.Plan[2].State)
				}
				if tl.Plan[0].Took != "20s" || tl.Rounds != 10 {
					t.Errorf("took %q rounds %d, want 20s and 10", tl.Plan[0].Took, tl.Rounds)
				}
				// 60 s under a leader, one 30 s bake: 30 s for 2 rounds = 15 s a round;
				// best stage: 20 s for one round. Ideal 10 x 15 s + 3 bakes = 240 s.
				if tl.Round != "15s" || tl.Ideal != "4m0s" {
					t.Errorf("round %q ideal %q, want 15s and 4m0s", tl.Round, tl.Ideal)
				}
				// Expected: 60 s + 8 rounds x 15 s + 2 bakes left = 240 s.
				if tl.Expected != "4m0s" || !tl.ETA.Equal(t0.Add(240*time.Second)) || tl.Ratio != 1 {
					t.Errorf("expected %q eta %v ratio %v", tl.Expected, tl.ETA, tl.Ratio)
				}
			},
		},
		{
			name: "a wave whose nodes all have an outcome runs until its stage ends",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: waves,
				StartedAt: at(0), LeaderTime: durationpb.New(45 * time.Second),
				Counts: &sluicev1.RolloutCounts{Total: 100, Provisioned: 30, Pending: 70, Attempted: 30},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), EndedAt: at(20), Nodes: 10, Provisioned: 10}, {Wave: 2, StartedAt: at(40), Nodes: 20, Provisioned: 20}}},
			now: 45,
			want: func(t *testing.T, tl Timeline) {
				if tl.Plan[1].State != "running" || tl.Plan[1].Done != 20 {
					t.Errorf("wave 2 %s with %d done, want running with 20", tl.Plan[1].State, tl.Plan[1].Done)
				}
			},
		},
		{
			name: "a part of a round counts",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: waves,
				StartedAt: at(0), LeaderTime: durationpb.New(45 * time.Second),
				Counts: &sluicev1.RolloutCounts{Total: 100, Provisioned: 15, Pending: 85, Attempted: 15},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), EndedAt: at(20), Nodes: 10, Provisioned: 10}, {Wave: 2, StartedAt: at(40), Nodes: 5, Provisioned: 5}}},
			now: 45,
			want: func(t *testing.T, tl Timeline) {
				if tl.Plan[1].State != "running" {
					t.Errorf("wave 2 %s, want running", tl.Plan[1].State)
				}
				// 15 s of work for 1.5 rounds: 10 s a round, 8.5 rounds to go.
				if tl.Round != "10s" || tl.Expected != "3m10s" || tl.Ratio < 1 {
					t.Errorf("round %q expected %q ratio %v, want 10s, 3m10s and at least 1", tl.Round, tl.Expected, tl.Ratio)
				}
			},
		},
		{
			name: "no waves: one sliding window, paced by what finished",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: &sluicev1.Strategy{MaxParallel: "5"},
				StartedAt: at(0), Counts: &sluicev1.RolloutCounts{Total: 20, Provisioned: 10, InProgress: 5, Pending: 5, Attempted: 15}},
			now: 10,
			want: func(t *testing.T, tl Timeline) {
				if len(tl.Plan) != 1 || tl.Plan[0].Nodes != 20 || tl.Plan[0].Started != 15 || tl.Plan[0].Done != 10 || tl.Plan[0].State != "running" {
					t.Errorf("plan %+v", tl.Plan)
				}
				if tl.Round != "5s" || tl.Ideal != "20s" || tl.Expected != "20s" {
					t.Errorf("round %q ideal %q expected %q, want 5s, 20s, 20s", tl.Round, tl.Ideal, tl.Expected)
				}
			},
		},
		{
			// 12 started: 8 provisioned, 1 failed, 3 stopped in flight when it
			// was aborted (contract.TallyOf: 8 completed, 1 failed, 0 cancelled,
			// 3 stopped), 8 not started.
			name: "aborted: the nodes stopped in flight have no outcome, neither done nor paced",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, Strategy: &sluicev1.Strategy{MaxParallel: "5"},
				StartedAt: at(0), FinishedAt: at(18), Counts: &sluicev1.RolloutCounts{Total: 20, Provisioned: 8, Failed: 1, Stopped: 3, NotStarted: 8, Attempted: 12}},
			now: 30,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "0:20/12/9:done" {
					t.Errorf("plan %s, want 20 to change, 12 started, 9 done (3 stopped in flight)", got)
				}
				// 18 s for 9 finished, 1.8 rounds of 5: 10 s a round; 4 rounds ideal.
				if tl.Round != "10s" || tl.Ideal != "40s" || tl.Expected != "" {
					t.Errorf("round %q ideal %q expected %q, want 10s, 40s and none", tl.Round, tl.Ideal, tl.Expected)
				}
			},
		},
		{
			name: "ended: no estimate, every started wave done, the others not reached",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Strategy: waves,
				StartedAt: at(0), FinishedAt: at(30), Counts: &sluicev1.RolloutCounts{Total: 100, Provisioned: 9, Failed: 1, NotStarted: 90, Attempted: 10},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), EndedAt: at(25), Nodes: 10, Provisioned: 9, Failed: 1}}},
			now: 100,
			want: func(t *testing.T, tl Timeline) {
				if tl.Expected != "" || !tl.ETA.IsZero() || tl.Elapsed != "30s" {
					t.Errorf("expected %q eta %v elapsed %q", tl.Expected, tl.ETA, tl.Elapsed)
				}
				if tl.Plan[0].State != "done" || tl.Plan[1].State != "unreached" {
					t.Errorf("states %s %s", tl.Plan[0].State, tl.Plan[1].State)
				}
			},
		},
		{
			name:  "nothing finished yet: no pace, no estimate",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: waves, StartedAt: at(0), Counts: &sluicev1.RolloutCounts{Total: 100, InProgress: 10, Pending: 90, Attempted: 10}},
			now:   5,
			want: func(t *testing.T, tl Timeline) {
				if tl.Round != "" || tl.Expected != "" || tl.Elapsed != "5s" {
					t.Errorf("round %q expected %q elapsed %q", tl.Round, tl.Expected, tl.Elapsed)
				}
			},
		},
		{
			// As the coordinator records it: an open stage's results stay zero
			// until it ends, which is when the next one begins (after the bake);
			// 3 of the 5 nodes already ran the config and are never started.
			name: "wave 1 done and baking while its stage is still open; waves past the nodes to change are not needed",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: canary,
				StartedAt: at(0), LeaderTime: durationpb.New(12 * time.Second), BakeUntil: at(30),
				Counts: &sluicev1.RolloutCounts{Total: 5, Pending: 1, Provisioned: 4, Attempted: 1},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 2, Provisioned: 3}}}},
			now: 12,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/1:baking 2:1/0/0:planned 3:0/0/0:unneeded" {
					t.Errorf("plan %s, want wave 1 baking with its node done, wave 2 planned for the other node to change, wave 3 not needed", got)
				}
				if st := tl.Plan[0].Stages; len(st) != 1 || st[0].Started != 1 || st[0].Provisioned != 1 || st[0].State != "baking" {
					t.Errorf("wave 1's stage %+v, want 1 started, 1 provisioned, baking", st)
				}
				if tl.Changes != 2 || tl.Total != 5 || tl.Rounds != 2 {
					t.Errorf("changes %d of %d in %d rounds, want 2 of 5 in 2", tl.Changes, tl.Total, tl.Rounds)
				}
				// 12 s under a leader, 7 s of them in the bake (18 s left of
				// 25): 5 s for the one node finished. Then 1 round and the
				// bake's 18 s: 35 s, the ideal (2 rounds and one bake).
				if tl.Round != "5s" || tl.Expected != "35s" || tl.Ideal != "35s" {
					t.Errorf("round %q expected %q ideal %q, want 5s, 35s, 35s", tl.Round, tl.Expected, tl.Ideal)
				}
			},
		},
		{
			// While a pause holds the bake the record has bakeLeft and no
			// bakeUntil: still the bake, its time left standing still.
			name: "wave 1 baking, the bake held by a pause: its time left stands still",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: canary,
				StartedAt: at(0), LeaderTime: durationpb.New(12 * time.Second), BakeLeft: durationpb.New(18 * time.Second),
				Counts: &sluicev1.RolloutCounts{Total: 5, Pending: 1, Provisioned: 4, Attempted: 1},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 2, Provisioned: 3}}}},
			now: 300,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/1:baking 2:1/0/0:planned 3:0/0/0:unneeded" {
					t.Errorf("plan %s, want wave 1 baking (held), wave 2 planned", got)
				}
				// As above: 12 s under a leader, 7 s of them baked (18 s of 25
				// left): 5 s a round, 35 s expected, whatever the wall clock.
				if tl.Round != "5s" || tl.Expected != "35s" || tl.Ideal != "35s" {
					t.Errorf("round %q expected %q ideal %q, want 5s, 35s, 35s", tl.Round, tl.Expected, tl.Ideal)
				}
			},
		},
		{
			name: "a bake with a node in flight: the stage still runs",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Strategy: canary,
				StartedAt: at(0), LeaderTime: durationpb.New(12 * time.Second), BakeUntil: at(30),
				Counts: &sluicev1.RolloutCounts{Total: 5, InProgress: 1, Provisioned: 3, Pending: 1, Attempted: 1},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 2, Provisioned: 3}}}},
			now: 12,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/0:running 2:1/0/0:planned 3:0/0/0:unneeded" {
					t.Errorf("plan %s, want wave 1 running", got)
				}
			},
		},
		{
			name: "succeeded: every wave that started nodes done, the one no node was left for not needed; a stage's time is less the bake after it",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, Strategy: canary,
				StartedAt: at(0), FinishedAt: at(26), LeaderTime: durationpb.New(26 * time.Second),
				Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 5, Attempted: 2},
				Stages: []*sluicev1.StageResult{
					{Wave: 1, StartedAt: at(0), EndedAt: at(26), Nodes: 1, Provisioned: 1, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 2, Provisioned: 3}},
					{Wave: 2, StartedAt: at(26), EndedAt: at(26), Nodes: 1, Provisioned: 1, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 1, Provisioned: 4, Attempted: 1}, StartedBefore: 1},
				}},
			now: 40,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/1:done 2:1/1/1:done 3:0/0/0:unneeded" {
					t.Errorf("plan %s, want waves 1 and 2 done, 3 not needed", got)
				}
				if tl.Plan[0].Took != "1s" || tl.Plan[0].Stages[0].Took != "1s" {
					t.Errorf("wave 1 took %q (stage %q), want 1s: 26 s less the 25 s bake", tl.Plan[0].Took, tl.Plan[0].Stages[0].Took)
				}
			},
		},
		{
			name: "rolled back in wave 2: wave 3 not reached",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Strategy: canary,
				StartedAt: at(0), FinishedAt: at(30), Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 1, Failed: 1, NotStarted: 3, Attempted: 2},
				Stages: []*sluicev1.StageResult{
					{Wave: 1, StartedAt: at(0), EndedAt: at(26), Nodes: 1, Provisioned: 1, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 5}},
					{Wave: 2, StartedAt: at(26), EndedAt: at(30), Nodes: 1, Failed: 1, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 4, Provisioned: 1, Attempted: 1}, StartedBefore: 1},
				}},
			now: 40,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/1:done 2:2/1/1:done 3:2/0/0:unreached" {
					t.Errorf("plan %s, want waves 1 and 2 done, 3 not reached", got)
				}
			},
		},
		{
			// A coordinator that kept no stages (an older image's record, as
			// docker-compose may still run): the rollout stopped in wave 1,
			// its canary the node that failed. Its started node is wave 1's,
			// not "0 started … not reached".
			name: "rolled back in wave 1 without stage records: the canary started and failed, the rest not reached",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Strategy: canary,
				StartedAt: at(0), FinishedAt: at(3), Counts: &sluicev1.RolloutCounts{Total: 5, Failed: 1, NotStarted: 4, Reverted: 1, Attempted: 1}},
			now: 40,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/1:done 2:2/0/0:unreached 3:2/0/0:unreached" {
					t.Errorf("plan %s, want wave 1 done with its one node, waves 2 and 3 not reached", got)
				}
			},
		},
		{
			name: "rolled back in wave 1, the stage's record without its count of started nodes",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, Strategy: canary,
				StartedAt: at(0), FinishedAt: at(3), Counts: &sluicev1.RolloutCounts{Total: 5, Failed: 1, NotStarted: 4, Reverted: 1, Attempted: 1},
				Stages: []*sluicev1.StageResult{{Wave: 1, StartedAt: at(0), EndedAt: at(2), Failed: 1, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Pending: 5}}}},
			now: 40,
			want: func(t *testing.T, tl Timeline) {
				if got := planOf(tl); got != "1:1/1/1:done 2:2/0/0:unreached 3:2/0/0:unreached" {
					t.Errorf("plan %s, want wave 1 done with its one node", got)
				}
			},
		},
		{
			// The record keeps a stage's failure domain as its sort key.
			name: "a failure-domain stage is named by its value, not its sort key",
			given: &sluicev1.Rollout{Id: "r", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK,
				Strategy:  &sluicev1.Strategy{MaxParallel: "1", FirstWave: 1, FailureDomain: "zone"},
				StartedAt: at(0), FinishedAt: at(3), Counts: &sluicev1.RolloutCounts{Total: 5, Failed: 1, NotStarted: 4, Reverted: 1, Attempted: 1},
				Stages: []*sluicev1.StageResult{{Wave: 1, Domain: "0zone-a", StartedAt: at(0), EndedAt: at(2), Nodes: 1, Failed: 1}, {Wave: 2, Domain: "1", StartedAt: at(2)}}},
			now: 40,
			want: func(t *testing.T, tl Timeline) {
				if d := tl.Plan[0].Stages[0].Domain; d != "zone-a" {
					t.Errorf("stage domain %q, want zone-a", d)
				}
				if d := tl.Plan[1].Stages[0].Domain; d != "(unlabelled)" {
					t.Errorf("stage domain %q, want (unlabelled)", d)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.want(t, RolloutTimeline(c.given, t0.Add(time.Duration(c.now)*time.Second))) })
	}
}

// planOf is tl's plan as "wave:planned/started/done:state ...".
func planOf(tl Timeline) string {
	var b strings.Builder
	for i, p := range tl.Plan {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d/%d/%d:%s", p.Wave, p.Nodes, p.Started, p.Done, p.State)
	}
	return b.String()
}
