package contract

import (
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestTallyOf_EachListAddsUpToItsTotal: the records of a rollout at each
// point a node can be in, and one that does not add up, which says so.
func TestTallyOf_EachListAddsUpToItsTotal(t *testing.T) {
	refused := &sluicev1.NodeOutcome{Node: "n9", Result: sluicev1.NodeResult_NODE_RESULT_REFUSED}
	tests := []struct {
		name    string
		given   *sluicev1.Rollout
		wantOps string // the operations, in order: in progress, completed, failed, cancelled, stopped
		wantOff string
	}{
		{name: "running", given: &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 5, Pending: 1, InProgress: 1, Provisioned: 3, Attempted: 2}},
			wantOps: "1 1 0 0 0"},
		{name: "rolled back with a node stopped in flight (the issue's 5 attempted, 4 accounted for)",
			given:   &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 3, Failed: 1, Stopped: 1, Attempted: 5, Reverted: 5}},
			wantOps: "0 3 1 0 1"},
		{name: "a timeout is a cancelled operation, a refused node none",
			given: &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 6, Provisioned: 2, Failed: 3, TimedOut: 1, NotStarted: 1, Attempted: 4},
				Failures: []*sluicev1.NodeOutcome{refused}},
			wantOps: "0 2 1 1 0"},
		{name: "skipped after it started: completed without failing",
			given:   &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 3, Provisioned: 2, Skipped: 1, Attempted: 3}},
			wantOps: "0 3 0 0 0"},
		{name: "a record whose forward counts miss a node says so",
			given:   &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 3, Failed: 1, Attempted: 4}},
			wantOps: "0 3 1 0 0", wantOff: "the counts add up to 4, not the total 5"},
		{name: "operations that cannot have been",
			given:   &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 2, InProgress: 2, Attempted: 1}},
			wantOps: "2 0 0 0 0", wantOff: "the operations add up to 2, not the 1 attempted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TallyOf(tt.given)
			var ops []string
			for _, c := range got.Operations {
				ops = append(ops, itoa(c.N))
			}
			if strings.Join(ops, " ") != tt.wantOps || got.Off != tt.wantOff {
				t.Fatalf("operations %q, off %q; want %q, off %q", strings.Join(ops, " "), got.Off, tt.wantOps, tt.wantOff)
			}
			if tt.wantOff == "" && (Sum(got.Nodes) != got.Total || Sum(got.Operations) != got.Attempted || Sum(got.Revert) != got.Touched) {
				t.Fatalf("nodes add up to %d of %d, operations to %d of %d, revert to %d of %d", Sum(got.Nodes), got.Total,
					Sum(got.Operations), got.Attempted, Sum(got.Revert), got.Touched)
			}
		})
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// TestTally_N_LooksUpEachCategoryOnce: every key finds its own count, the
// parts of failed and skipped included; the operations' are Op's.
func TestTally_N_LooksUpEachCategoryOnce(t *testing.T) {
	tl := TallyOf(&sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 28, Pending: 1, InProgress: 2, Provisioned: 3,
		Failed: 4, TimedOut: 1, Skipped: 5, Incompatible: 2, Stopped: 6, NotStarted: 7, Reverting: 8, Reverted: 9, RevertFailed: 10, Attempted: 12}})
	want := map[string]uint32{CountPending: 1, CountInProgress: 2, CountProvisioned: 3, CountFailed: 4, CountTimedOut: 1,
		CountSkipped: 5, CountIncompatible: 2, CountStopped: 6, CountNotStarted: 7, CountReverting: 8, CountReverted: 9,
		CountRevertFailed: 10, CountCompleted: 0, "nonsense": 0}
	for key, n := range want {
		if got := tl.N(key); got != n {
			t.Errorf("N(%s) = %d, want %d", key, got, n)
		}
	}
	// Operations: 2 in progress, 4-1 failed, 1 cancelled, 6 stopped, the rest of 12 completed.
	wantOps := map[string]uint32{CountInProgress: 2, CountFailed: 3, CountCancelled: 1, CountStopped: 6, CountCompleted: 0, CountPending: 0}
	for key, n := range wantOps {
		if got := tl.Op(key); got != n {
			t.Errorf("Op(%s) = %d, want %d", key, got, n)
		}
	}
}

// TestTally_Rest_ListsWhatTheColumnsLeaveOut: the forward categories that
// count a node and have no column, in order, with the columns add up to
// the total.
func TestTally_Rest_ListsWhatTheColumnsLeaveOut(t *testing.T) {
	tl := TallyOf(&sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 9, Provisioned: 3, Failed: 2, TimedOut: 1,
		Stopped: 1, NotStarted: 3, Reverted: 3, Attempted: 6}})
	rest := tl.Rest(CountProvisioned, CountFailed)
	var got []string
	for _, c := range rest {
		got = append(got, c.Words+" "+itoa(c.N))
	}
	if strings.Join(got, ", ") != "stopped in flight 1, not started 3" {
		t.Errorf("Rest = %q, want stopped in flight 1, not started 3", got)
	}
	if n := tl.N(CountProvisioned) + tl.N(CountFailed) + Sum(rest); n != tl.Total {
		t.Errorf("the columns and the rest add up to %d, not the total %d", n, tl.Total)
	}
	if rest := tl.Rest(CountPending, CountInProgress, CountProvisioned, CountFailed, CountSkipped, CountStopped, CountNotStarted); rest == nil || len(rest) != 0 {
		t.Errorf("every category a column: Rest = %v, want an empty list", rest)
	}
}

// TestStageTallyOf_AddsUpToTheNodesStarted: a stage's nodes started, laid
// out by category, add up: the stage open when the rollout stopped has its
// nodes in flight stopped (its record has no field for them), a running
// one counts from the rollout's counts now, a stage whose rollout-wide
// skipped counts nodes it never started does not count them.
func TestStageTallyOf_AddsUpToTheNodesStarted(t *testing.T) {
	ended := timestamppb.Now()
	tests := []struct {
		name  string
		given *sluicev1.Rollout
		stage int // of given's stages
		want  string
		off   string
	}{
		{
			name: "a wave ended, a node of a later wave left meanwhile",
			given: &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 2, Skipped: 1, Pending: 7, Attempted: 2},
				Stages: []*sluicev1.StageResult{{Wave: 1, EndedAt: ended, Nodes: 2, Provisioned: 2, Skipped: 1, CountsAtStart: &sluicev1.RolloutCounts{Total: 10, Pending: 10}}}},
			want: "in progress 0, provisioned 2, failed 0, skipped 0, stopped in flight 0",
		},
		{
			name: "the last wave of a rolled-back rollout: one failed, one stopped in flight, one left after it started",
			given: &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK,
				Counts: &sluicev1.RolloutCounts{Total: 10, Provisioned: 3, Failed: 1, TimedOut: 1, Skipped: 1, Stopped: 1, NotStarted: 4, Attempted: 6, Reverted: 5},
				Stages: []*sluicev1.StageResult{
					{Wave: 1, EndedAt: ended, Nodes: 2, Provisioned: 2, CountsAtStart: &sluicev1.RolloutCounts{Total: 10, Pending: 10}},
					{Wave: 2, EndedAt: ended, Nodes: 4, Provisioned: 1, Failed: 1, TimedOut: 1, Skipped: 1,
						CountsAtStart: &sluicev1.RolloutCounts{Total: 10, Provisioned: 2, Pending: 8, Attempted: 2}}}},
			stage: 1,
			want:  "in progress 0, provisioned 1, failed 1 (timed out 1), skipped 1, stopped in flight 1",
		},
		{
			name: "a wave running while its rollout reverts",
			given: &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING,
				Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 2, Failed: 1, Stopped: 1, NotStarted: 1, Attempted: 4, Reverting: 3},
				Stages: []*sluicev1.StageResult{{Wave: 2, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Provisioned: 1, Pending: 4, Attempted: 1}}}},
			want: "in progress 0, provisioned 1, failed 1, skipped 0, stopped in flight 1",
		},
		{
			name: "a wave running",
			given: &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
				Counts: &sluicev1.RolloutCounts{Total: 5, Provisioned: 2, InProgress: 2, Pending: 1, Attempted: 4},
				Stages: []*sluicev1.StageResult{{Wave: 2, CountsAtStart: &sluicev1.RolloutCounts{Total: 5, Provisioned: 1, Pending: 4, Attempted: 1}}}},
			want: "in progress 2, provisioned 1, failed 0, skipped 0, stopped in flight 0",
		},
		{
			name: "more outcomes than nodes started (a record that does not add up) says so",
			given: &sluicev1.Rollout{Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, Counts: &sluicev1.RolloutCounts{Total: 3, Provisioned: 3, Attempted: 2},
				Stages: []*sluicev1.StageResult{{Wave: 1, EndedAt: ended, Nodes: 2, Provisioned: 3, CountsAtStart: &sluicev1.RolloutCounts{Total: 3, Pending: 3}}}},
			want: "in progress 0, provisioned 3, failed 0, skipped 0, stopped in flight 0",
			off:  "the counts add up to 3, not the 2 started",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := StageTallyOf(tt.given, tt.given.GetStages()[tt.stage])
			var got []string
			for _, c := range tl.Nodes {
				s := c.Words + " " + itoa(c.N)
				for _, of := range c.Of {
					if of.N > 0 {
						s += " (" + of.Words + " " + itoa(of.N) + ")"
					}
				}
				got = append(got, s)
			}
			if strings.Join(got, ", ") != tt.want {
				t.Errorf("got %s, want %s", strings.Join(got, ", "), tt.want)
			}
			if tl.Off != tt.off {
				t.Errorf("off %q, want %q", tl.Off, tt.off)
			}
			if tt.off == "" && Sum(tl.Nodes) != tl.Total {
				t.Errorf("the categories add up to %d, not the %d started", Sum(tl.Nodes), tl.Total)
			}
		})
	}
}

// Stopped in flight names the nodes the record names (the first of them,
// bounded), and says how many more it counts: once reverted, nothing else
// names them (sluice issue 42 item 3).
func TestTallyOf_StoppedInFlight_NamesTheRecordsNodes(t *testing.T) {
	tests := []struct {
		name      string
		stopped   uint32
		names     []string
		wantNames string
	}{
		{name: "every one named", stopped: 2, names: []string{"node-04", "node-05"}, wantNames: "node-04, node-05"},
		{name: "more than the record names", stopped: 150, names: []string{"node-001", "node-002"}, wantNames: "node-001, node-002 and 148 more"},
		{name: "none stopped: none named", stopped: 0, names: []string{"node-04"}, wantNames: ""},
		{name: "a record that names none", stopped: 1, wantNames: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &sluicev1.Rollout{Counts: &sluicev1.RolloutCounts{Total: 200, Stopped: tt.stopped, NotStarted: 200 - tt.stopped}, StoppedNodes: tt.names}
			for _, c := range TallyOf(r).Nodes {
				if c.Key != CountStopped {
					if len(c.Names) > 0 {
						t.Errorf("%s names %q", c.Key, c.Names)
					}
					continue
				}
				if got := c.Named(); got != tt.wantNames {
					t.Errorf("stopped in flight names %q, want %q", got, tt.wantNames)
				}
			}
		})
	}
}
