package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Every write is a named operation with the strategy's apply deadline, and
// a node whose agent stopped its operation at that deadline timed out.
func TestDecide_Operations_NamedWithTheirDeadline_AgentStoppedOneTimesOut(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	h := withStrategy(head(2, r1.Id, "2"), &sluicev1.Strategy{MaxParallel: "2", ApplyDeadline: durationOf(90 * time.Second), FailureBudget: "1"})
	id1 := rolloutID(h)
	s := NewState()
	acts := Decide(s, Loaded{Head: h, HeadRev: r1, Presence: presence("n1", "n2", "n3"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	for _, w := range writes(acts) {
		if w.Desired.GetOperation() != id1+"/"+w.Desired.GetNode()+"/apply" || w.Desired.GetDeadline().AsDuration() != 3*time.Minute {
			t.Fatalf("write %s: operation %q deadline %s; want %s/%s/apply, 3m (twice the apply deadline)", w.Desired.GetNode(), w.Desired.GetOperation(),
				w.Desired.GetDeadline().AsDuration(), id1, w.Desired.GetNode())
		}
	}
	if c := s.rollout.GetCounts(); c.GetAttempted() != 2 || c.GetInProgress() != 2 {
		t.Fatalf("counts %v; want 2 attempted, 2 in progress", c)
	}
	st := status("n1", invalid, fp1, id1)
	st.FailedCheck, st.Message = contract.FailedCheckDeadline, "operation "+id1+"/n1/apply did not finish within its deadline 1m30s: stopped while applying; restored last-good"
	acts = Decide(s, Status{S: st}, t0.Add(time.Minute))
	got := summarize(acts)
	if !slices.Contains(got, "emit NodeTimedOut") || slices.Contains(got, "emit NodeFailed") {
		t.Fatalf("actions %v; want NodeTimedOut, not NodeFailed", got)
	}
	rec, _ := findAction[RecordInvalid](acts)
	if rec.Fingerprint.GetCause() != CauseTimedOut || rec.Fingerprint.GetCheck() != contract.FailedCheckDeadline {
		t.Fatalf("recorded %v; want cause timed-out, check deadline", rec.Fingerprint)
	}
	o := outcomeOf(s.rollout.GetFailures(), "n1")
	if o.GetResult() != sluicev1.NodeResult_NODE_RESULT_TIMED_OUT || !strings.Contains(o.GetMessage(), "its agent stopped the operation at its deadline") {
		t.Fatalf("outcome %v; want TIMED_OUT saying the agent stopped it", o)
	}
	if c := s.rollout.GetCounts(); c.GetTimedOut() != 1 || c.GetFailed() != 1 || c.GetAttempted() != 3 {
		t.Fatalf("counts %v; want 1 timed out (counted failed), n3 started: 3 attempted", c)
	}
}

// Each wave's results are kept in the record, final when the next starts.
func TestDecide_StageResults_PerWave(t *testing.T) {
	r0, r1 := testRev("0000aaaa"), testRev("aaaa1111")
	fp1 := targetOf(r1)
	h := withStrategy(head(2, r1.Id, "2"), &sluicev1.Strategy{MaxParallel: "2", FirstWave: 1, WaveGrowth: 2, FailureBudget: "1"})
	id1 := rolloutID(h)
	var got []string
	s := NewState()
	Decide(s, Loaded{Head: h, HeadRev: r1, Presence: presence("n1", "n2", "n3", "n4"),
		LastApplied: &sluicev1.RolloutRef{Revision: r0.Id, Generation: 1}, LastAppliedRev: r0}, t0)
	var acts []Action
	at := t0
	for _, step := range []struct {
		node  string
		phase sluicev1.NodePhase
	}{{"n1", provisioned}, {"n2", provisioned}, {"n3", invalid}, {"n4", provisioned}} {
		at = at.Add(time.Second)
		acts = Decide(s, Status{S: status(step.node, step.phase, fp1, id1)}, at)
	}
	f, ok := findAction[FinishRollout](acts)
	if !ok {
		t.Fatal("no FinishRollout")
	}
	for _, st := range f.Rollout.GetStages() {
		got = append(got, fmt.Sprintf("wave %d: %d nodes, %d provisioned, %d failed, ended %v", st.GetWave(), st.GetNodes(),
			st.GetProvisioned(), st.GetFailed(), st.GetEndedAt() != nil))
	}
	want := []string{"wave 1: 1 nodes, 1 provisioned, 0 failed, ended true", "wave 2: 2 nodes, 1 provisioned, 1 failed, ended true",
		"wave 3: 1 nodes, 1 provisioned, 0 failed, ended true"}
	if !slices.Equal(got, want) {
		t.Fatalf("stages:\n got  %v\n want %v", got, want)
	}
}

func TestPrune_KeepsTheNewestAndTheProtected(t *testing.T) {
	rec := func(gen uint64, phase sluicev1.RolloutPhase) *sluicev1.Rollout {
		return &sluicev1.Rollout{Id: fmt.Sprintf("%d-r", gen), Generation: gen, Phase: phase}
	}
	ok, failed, running := sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING
	all := []*sluicev1.Rollout{rec(3, failed), rec(1, ok), rec(5, failed), rec(2, failed), rec(4, failed), rec(6, running)}
	tests := []struct {
		name    string
		keep    int
		protect []string
		want    []string
	}{
		{"the newest 2 ended stay; a running one is never ended", 2, nil, []string{"1-r", "2-r", "3-r"}},
		{"the one in force is kept besides", 2, []string{"1-r"}, []string{"2-r", "3-r"}},
		{"fewer than the retention: nothing", 10, nil, nil},
		{"negative keeps all", -1, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Prune(all, tc.keep, tc.protect...); !slices.Equal(got, tc.want) {
				t.Errorf("Prune = %v; want %v", got, tc.want)
			}
		})
	}
}
