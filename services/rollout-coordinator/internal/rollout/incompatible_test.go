package rollout

import (
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const incompatiblePhase = sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE

// incompatibleStatus is node's INCOMPATIBLE report of fp under rollout, as
// an agent too old for it writes it.
func incompatibleStatus(node, fp, rollout string) *sluicev1.NodeStatus {
	return &sluicev1.NodeStatus{Node: node, Phase: incompatiblePhase, Fingerprint: fp, Rollout: rollout, AgentVersion: "v0.9.0",
		Message:     "agent v0.9.0 cannot read its desired config: it needs config feature(s) bakeChecks",
		CheckOutput: `proto: (line 1:2): unknown field "bakeChecks"`}
}

// TestDecide_Incompatible covers issue 38 item 2: an agent that cannot read
// its desired config (it needs a newer agent) reports INCOMPATIBLE. The node
// is skipped — listed, counted, said why — never a failure, and its
// fingerprint, which says nothing about that config, is never recorded
// invalid (invariant I9): not at the report, and not at the pickup deadline
// after it (the old path timed it out and recorded the config invalid).
func TestDecide_Incompatible(t *testing.T) {
	budget0 := func(maxPar string) *sluicev1.Head { return head(1, r1.Id, maxPar) } // failure budget 0
	skippedAsIncompatible := func(t *testing.T, s *State) {
		t.Helper()
		sk := s.rollout.GetSkipped()
		if len(sk) != 1 || sk[0].GetNode() != "n1" || sk[0].GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE ||
			sk[0].GetPhase() != incompatiblePhase || !strings.Contains(sk[0].GetOutput(), "unknown field") ||
			!strings.Contains(sk[0].GetMessage(), "v0.9.0") || sk[0].GetFingerprint() != fp1 {
			t.Fatalf("skipped = %v, want n1 listed INCOMPATIBLE with its agent's message and the decoder's", sk)
		}
		if len(s.rollout.GetFailures()) != 0 || len(s.invalid) != 0 {
			t.Fatalf("failures %v, invalid %v: an agent's version is not the config's failure", s.rollout.GetFailures(), s.invalid)
		}
		if c := s.rollout.GetCounts(); c.GetIncompatible() != 1 || c.GetSkipped() != 1 || c.GetFailed() != 0 {
			t.Fatalf("counts %v, want 1 skipped of which 1 incompatible, none failed", c)
		}
	}
	runDecide(t, []decideCase{
		{
			name:       "an incompatible node is skipped, not failed, and frees its slot",
			given:      []Event{loaded(budget0("1"), r1, "n1", "n2")},
			event:      Status{S: incompatibleStatus("n1", fp1, id1)},
			want:       []string{"write n2", "emit NodeIncompatible"},
			wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=1",
			check:      skippedAsIncompatible,
		},
		{
			name: "its pickup deadline passing later times nothing out and records nothing",
			given: []Event{loaded(budget0("2"), r1, "n1", "n2"), Written{Node: "n1", Fingerprint: fp1},
				Status{S: incompatibleStatus("n1", fp1, id1)}},
			event:      Tick{},
			wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=1",
			check: func(t *testing.T, s *State) {
				Decide(s, Tick{}, t0.Add(11*time.Minute)) // past the default pickup deadline of 10m
				if c := s.rollout.GetCounts(); c.GetTimedOut() != 0 || c.GetIncompatible() != 1 {
					t.Fatalf("counts %v after the pickup deadline, want n1 still skipped as incompatible, none timed out", c)
				}
				if s.invalid[fp1] != nil && s.invalid[fp1].GetNode() == "n1" {
					t.Fatalf("n1's fingerprint recorded invalid for n1: %v", s.invalid[fp1])
				}
			},
		},
		{
			name:  "the rollout succeeds once the others are provisioned, and says why a node was skipped",
			given: []Event{loaded(budget0("2"), r1, "n1", "n2"), Status{S: incompatibleStatus("n1", fp1, id1)}},
			event: Status{S: status("n2", provisioned, fp1, id1)},
			want:  []string{"finish Succeeded", "emit RolloutSucceeded"},
			check: func(t *testing.T, s *State) {
				if s.lastApplied.GetRevision() != r1.Id || len(s.invalid) != 0 {
					t.Fatalf("lastApplied %v, invalid %v", s.lastApplied, s.invalid)
				}
			},
		},
		{
			name:  "a rollout whose only node cannot read it ends Aborted, naming the agent, and records nothing",
			given: []Event{loaded(budget0("1"), r1, "n1")},
			event: Status{S: incompatibleStatus("n1", fp1, id1)},
			want:  []string{"finish Aborted", "emit NodeIncompatible", "emit RolloutAborted"},
			check: func(t *testing.T, s *State) {
				if len(s.invalid) != 0 || s.lastApplied != nil {
					t.Fatalf("invalid %v, lastApplied %v", s.invalid, s.lastApplied)
				}
			},
		},
		{
			name: "a term resuming finds the report and keeps the node skipped, without announcing it again",
			event: Loaded{
				Head: head(1, r1.Id, "1"), HeadRev: r1,
				Active: &sluicev1.Rollout{Id: id1, Revision: r1.Id, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
					Strategy: &sluicev1.Strategy{MaxParallel: "1"},
					Skipped:  []*sluicev1.NodeOutcome{{Node: "n1", Fingerprint: fp1, Result: sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE}}},
				ActiveRev: r1, Presence: presence("n1", "n2"),
				Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1, Operation: id1 + "/n1/apply"}},
				Status:  []*sluicev1.NodeStatus{incompatibleStatus("n1", fp1, id1)},
			},
			want:       []string{"write n2", "emit RolloutResumed"},
			wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=1",
			check:      skippedAsIncompatible,
		},
		{
			name: "a revert its agent cannot read is a revert that failed, and records nothing",
			given: []Event{loaded(budget0("2"), r1, "n1", "n2"), Status{S: status("n2", invalid, fp1, id1)},
				Status{S: status("n2", provisioned, emptyFP, id1)}},
			event: Status{S: incompatibleStatus("n1", emptyFP, id1)},
			want:  []string{"finish RolledBack", "emit NodeRevertFailed", "emit RolloutRolledBack"},
			check: func(t *testing.T, s *State) {
				if f := s.invalid[emptyFP]; f != nil {
					t.Fatalf("the backup recorded invalid: %v", f)
				}
			},
		},
	})
}
