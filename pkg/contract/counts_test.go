package contract

import (
	"strconv"
	"strings"
	"testing"

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
