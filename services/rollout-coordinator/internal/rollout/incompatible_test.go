package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
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

// TestDecide_AgentTooOldForTheTarget covers issue 38 item 2's class: each
// agent states in its presence the config features it reads (none: an
// agent of the baseline release), and the coordinator never writes a
// config an agent cannot read. A rollout that needs a newer agent on some
// nodes is refused before any node is touched, naming them, their versions
// and the feature; with skip_incompatible they are skipped; a node met
// later is skipped either way. Nothing is ever timed out or recorded
// invalid for it. Before, the desired config was written, the old agent
// could not decode it, and the node was timed out and the good config
// recorded invalid.
func TestDecide_AgentTooOldForTheTarget(t *testing.T) {
	// An agent of the baseline release: its presence states no features.
	old := &sluicev1.NodePresence{Node: "n2", Labels: map[string]string{"zone": "a"}, AgentVersion: "v0.4.0"}
	withBake := func(skip bool) *sluicev1.Head {
		return withStrategy(head(1, r1.Id, "3"), &sluicev1.Strategy{MaxParallel: "3", FirstWave: 3, BakeTime: durationpb.New(time.Minute),
			BakeChecks: 2, SkipIncompatible: skip})
	}
	fleet := func(h *sluicev1.Head) Loaded {
		return Loaded{Head: h, HeadRev: r1, Presence: append(presence("n1", "n3"), old)}
	}
	nothingRecorded := func(t *testing.T, s *State) {
		t.Helper()
		if len(s.invalid) != 0 {
			t.Fatalf("invalid %v: an agent's version is not the config's failure", s.invalid)
		}
	}
	runDecide(t, []decideCase{
		{
			name:  "a rollout needing a newer agent on a node is refused before any node is touched, naming it",
			event: fleet(withBake(false)),
			want:  []string{"start " + id1, "finish Aborted", "emit RolloutStarted", "emit RolloutAborted"},
			check: func(t *testing.T, s *State) {
				nothingRecorded(t, s)
				if s.rollout != nil {
					t.Fatalf("rollout %v still running", s.rollout)
				}
				for _, n := range []string{"n1", "n2", "n3"} {
					if s.nodes[n].desired != nil {
						t.Fatalf("%s written %v; a refused rollout touches no node", n, s.nodes[n].desired)
					}
				}
			},
		},
		{
			name:       "with skip_incompatible the node is skipped, never written, and the others go on",
			event:      fleet(withBake(true)),
			want:       []string{"start " + id1, "write n1", "write n3", "emit RolloutStarted", "emit WaveStarted", "emit NodeIncompatible"},
			wantCounts: "total=3 pending=0 inprogress=2 provisioned=0 failed=0 skipped=1",
			check: func(t *testing.T, s *State) {
				nothingRecorded(t, s)
				sk := s.rollout.GetSkipped()
				if len(sk) != 1 || sk[0].GetNode() != "n2" || sk[0].GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE ||
					!strings.Contains(sk[0].GetMessage(), "v0.4.0") || !strings.Contains(sk[0].GetMessage(), contract.FeatureBakeChecks) {
					t.Fatalf("skipped %v; want n2, incompatible, naming its version and the feature", sk)
				}
				if s.nodes["n2"].desired != nil || s.rollout.GetCounts().GetIncompatible() != 1 {
					t.Fatalf("n2 desired %v, counts %v", s.nodes["n2"].desired, s.rollout.GetCounts())
				}
			},
		},
		{
			name:       "a config the old agent reads is written to it as to any",
			event:      Loaded{Head: head(1, r1.Id, "3"), HeadRev: r1, Presence: append(presence("n1", "n3"), old)},
			want:       []string{"start " + id1, "write n1", "write n2", "write n3", "emit RolloutStarted"},
			wantCounts: "total=3 pending=0 inprogress=3 provisioned=0 failed=0 skipped=0",
		},
		{
			name:       "an old agent joining mid-rollout is skipped, not written, and not timed out",
			given:      []Event{loaded(withBake(false), r1, "n1")},
			event:      Presence{Node: "n2", P: old},
			want:       []string{"emit NodeJoinedRollout", "emit NodeIncompatible"},
			wantCounts: "total=2 pending=0 inprogress=1 provisioned=0 failed=0 skipped=1",
			check: func(t *testing.T, s *State) {
				Decide(s, Tick{}, t0.Add(time.Hour/2))
				if s.nodes["n2"].desired != nil || s.rollout.GetCounts().GetTimedOut() != 0 {
					t.Fatalf("n2 desired %v, counts %v", s.nodes["n2"].desired, s.rollout.GetCounts())
				}
				nothingRecorded(t, s)
			},
		},
		{
			name:       "a skipped node whose agent is upgraded in place is in the rollout again and written",
			given:      []Event{fleet(withBake(true))},
			event:      Presence{Node: "n2", P: &sluicev1.NodePresence{Node: "n2", Labels: map[string]string{"zone": "a"}, AgentVersion: "v0.5.0", ConfigFeatures: contract.ConfigFeatures}},
			want:       []string{"write n2", "emit NodeJoinedRollout"},
			wantCounts: "total=3 pending=0 inprogress=3 provisioned=0 failed=0 skipped=0",
		},
	})
}

// The refusal's record says which nodes, their versions, the feature and
// what to do, and lists the node INCOMPATIBLE; the counts add up.
func TestDecide_AgentTooOldForTheTarget_RefusalSaysWhy(t *testing.T) {
	old := &sluicev1.NodePresence{Node: "n2", Labels: map[string]string{"zone": "a"}, AgentVersion: "v0.4.0"}
	h := withStrategy(head(1, r1.Id, "3"), &sluicev1.Strategy{MaxParallel: "3", FirstWave: 3, BakeTime: durationpb.New(time.Minute), BakeChecks: 2})
	var fin *sluicev1.Rollout
	for _, a := range Decide(NewState(), Loaded{Head: h, HeadRev: r1, Presence: append(presence("n1", "n3"), old)}, t0) {
		if f, ok := a.(FinishRollout); ok {
			fin = f.Rollout
		}
	}
	if fin.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED {
		t.Fatalf("finished %v; want ABORTED", fin)
	}
	for _, want := range []string{"refused before touching any node", "n2 (agent v0.4.0)", contract.FeatureBakeChecks, "--skip-incompatible"} {
		if !strings.Contains(fin.GetReason(), want) {
			t.Errorf("reason %q does not say %q", fin.GetReason(), want)
		}
	}
	c := fin.GetCounts()
	if c.GetIncompatible() != 1 || c.GetSkipped() != 1 || c.GetNotStarted() != 2 || c.GetAttempted() != 0 || c.GetTotal() != 3 {
		t.Errorf("counts %v; want n2 incompatible, n1 and n3 not started, nothing attempted", c)
	}
	if sk := fin.GetSkipped(); len(sk) != 1 || sk[0].GetNode() != "n2" || sk[0].GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
		t.Errorf("skipped %v; want n2 incompatible", sk)
	}
}

// A leader stopped after storing the start of a rollout that needs a newer
// agent, but before storing its refusal (two writes), leaves a PROGRESSING
// record with no node touched. The next term refuses it as the start would
// have: ABORTED, naming the node, nothing written. The old adopt rolled it
// out and skipped the old agent's node, as if the strategy skipped
// incompatible nodes (chaos seed 148).
func TestDecide_RefusalOfAnIncompatibleRollout_HoldsAcrossALeaderStoppedBeforeIt(t *testing.T) {
	old := &sluicev1.NodePresence{Node: "n2", Labels: map[string]string{"zone": "a"}, AgentVersion: "v0.4.0"}
	h := withStrategy(head(1, r1.Id, "3"), &sluicev1.Strategy{MaxParallel: "3", FirstWave: 3, BakeTime: durationpb.New(time.Minute), BakeChecks: 2})
	fleet := append(presence("n1", "n3"), old)
	var started *sluicev1.Rollout
	for _, a := range Decide(NewState(), Loaded{Head: h, HeadRev: r1, Presence: fleet}, t0) {
		if st, ok := a.(StartRollout); ok {
			started = st.Rollout // stored; the leader stops before the refusal
		}
	}
	if started.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
		t.Fatalf("start stored %v; want the PROGRESSING record", started)
	}
	s := NewState()
	var fin *sluicev1.Rollout
	var got []string
	for _, a := range Decide(s, Loaded{Head: h, HeadRev: r1, Active: started, ActiveRev: r1, Term: 2, Presence: fleet}, t0.Add(time.Second)) {
		switch a := a.(type) {
		case FinishRollout:
			fin = a.Rollout
		case WriteDesired:
			got = append(got, a.Desired.GetNode())
		}
	}
	if len(got) != 0 {
		t.Errorf("the next term wrote %v; a refused rollout touches no node", got)
	}
	if fin.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED {
		t.Fatalf("the next term finished %v; want ABORTED", fin)
	}
	for _, want := range []string{"refused before touching any node", "n2 (agent v0.4.0)", contract.FeatureBakeChecks} {
		if !strings.Contains(fin.GetReason(), want) {
			t.Errorf("reason %q does not say %q", fin.GetReason(), want)
		}
	}
	if sk := fin.GetSkipped(); len(sk) != 1 || sk[0].GetNode() != "n2" || sk[0].GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
		t.Errorf("skipped %v; want n2 incompatible", sk)
	}
}
