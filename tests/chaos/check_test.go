package chaos

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// healthy is a hand-made observation of a correct run: rollout r1 succeeded
// on node-01 and node-02 (epoch 5), then r2 failed on node-02 beyond its
// budget and rolled back both nodes (epoch 9, a new leader).
func healthy() *Observation {
	const (
		empty = "empty"
		a1    = "fp-a1" // r1's target on node-01
		a2    = "fp-a2"
		b1    = "fp-b1" // r2's target on node-01
		b2    = "fp-b2"
	)
	desired := func(node, rollout, fp string, revert bool, epoch uint64, written float64) *sluicev1.DesiredConfig {
		return &sluicev1.DesiredConfig{Node: node, Rollout: rollout, Fingerprint: fp, Revert: revert, LeaderEpoch: epoch, WrittenAt: timestamppb.New(at(written))}
	}
	r1 := &sluicev1.Rollout{Id: "r1", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, LeaderEpoch: 5,
		Strategy:   &sluicev1.Strategy{ProgressDeadline: durationpb.New(30 * time.Second)},
		LeaderTime: durationpb.New(2 * time.Second), FinishedAt: timestamppb.New(at(2)),
		Counts: &sluicev1.RolloutCounts{Total: 2, Provisioned: 2}}
	r2 := &sluicev1.Rollout{Id: "r2", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, LeaderEpoch: 9,
		Strategy:   &sluicev1.Strategy{ProgressDeadline: durationpb.New(30 * time.Second)},
		LeaderTime: durationpb.New(3 * time.Second), FinishedAt: timestamppb.New(at(8)),
		Counts: &sluicev1.RolloutCounts{Total: 2, Provisioned: 1, Failed: 1, Reverted: 2},
		Failures: []*sluicev1.NodeOutcome{{Node: "node-02", Fingerprint: b2, Result: sluicev1.NodeResult_NODE_RESULT_INVALID,
			FailedCheck: "connectivity", Message: "gateway unreachable"}}}
	r2progress := &sluicev1.Rollout{Id: "r2", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, LeaderEpoch: 9}
	r1progress := &sluicev1.Rollout{Id: "r1", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, LeaderEpoch: 5}
	status := func(node, rollout, fp, applied string, p sluicev1.NodePhase, s float64) *sluicev1.NodeStatus {
		return &sluicev1.NodeStatus{Node: node, Rollout: rollout, Fingerprint: fp, AppliedFingerprint: applied, Phase: p, LastUpdate: timestamppb.New(at(s))}
	}
	ok, bad := sluicev1.NodePhase_NODE_PHASE_PROVISIONED, sluicev1.NodePhase_NODE_PHASE_INVALID
	return &Observation{
		EmptyFingerprint: empty,
		Rollouts:         []*sluicev1.Rollout{r1, r2},
		LastApplied:      &sluicev1.RolloutRef{Rollout: "r1"},
		Targets:          map[string]map[string]string{"r1": {"node-01": a1, "node-02": a2}, "r2": {"node-01": b1, "node-02": b2}},
		Fingerprints:     map[string]*sluicev1.InvalidFingerprint{b2: {Fingerprint: b2, Node: "node-02", Check: "connectivity", Output: "ping: 100% packet loss"}},
		Nodes: []NodeObs{
			{Name: "node-01", Live: true, OnDisk: a1, Desired: desired("node-01", "r2", a1, true, 9, 7), Backup: desired("node-01", "r2", a1, false, 9, 4),
				Status:  status("node-01", "r2", a1, a1, ok, 7.5),
				Applies: []Apply{{At: at(1), Fingerprint: a1, Rollout: "r1"}, {At: at(5), Fingerprint: b1, Rollout: "r2"}, {At: at(7.4), Fingerprint: a1, Rollout: "r2", Revert: true}}},
			{Name: "node-02", Live: true, OnDisk: a2, Desired: desired("node-02", "r2", a2, true, 9, 7), Backup: desired("node-02", "r2", a2, false, 9, 5),
				Status:  status("node-02", "r2", a2, a2, ok, 7.5),
				Applies: []Apply{{At: at(1), Fingerprint: a2, Rollout: "r1"}, {At: at(6), Fingerprint: b2, Rollout: "r2"}, {At: at(6.1), Fingerprint: a2, Rollout: "r1"}}},
		},
		Events: []*sluicev1.Event{
			{Type: "RolloutStarted", Rollout: "r1"}, {Type: "RolloutStarted", Rollout: "r2"},
			{Type: "NodeReverted", Rollout: "r2", Node: "node-01"}, {Type: "NodeReverted", Rollout: "r2", Node: "node-02"},
			{Type: "NodeReaped", Node: "node-03"},
		},
		RolloutWrites: []KVOp{
			{Key: "r1", Revision: 1, At: at(0), Rollout: r1progress},
			{Key: "r1", Revision: 2, At: at(2), Rollout: r1},
			{Key: "r2", Revision: 3, At: at(4), Rollout: r2progress},
			{Key: "r2", Revision: 4, At: at(8), Rollout: r2},
		},
		ConfigWrites: []KVOp{
			{Key: "node-01.desired", Revision: 1, At: at(0.5), Desired: desired("node-01", "r1", a1, false, 5, 0.5)},
			{Key: "node-02.desired", Revision: 2, At: at(0.5), Desired: desired("node-02", "r1", a2, false, 5, 0.5)},
			{Key: "node-03.desired", Revision: 3, At: at(3), Delete: true}, // node-03 was reaped between rollouts
			{Key: "node-01.desired", Revision: 4, At: at(4.5), Desired: desired("node-01", "r2", b1, false, 9, 4.5)},
			{Key: "node-02.desired", Revision: 5, At: at(5.5), Desired: desired("node-02", "r2", b2, false, 9, 5.5)},
			{Key: "node-01.desired", Revision: 6, At: at(7), Desired: desired("node-01", "r2", a1, true, 9, 7)},
		},
		StatusWrites: []*sluicev1.NodeStatus{
			status("node-01", "r2", b1, b1, ok, 5.2),
			status("node-02", "r2", b2, a2, bad, 6.2),
		},
		Expect: map[string]Expectation{
			"r1": {Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}},
			"r2": {Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK}, MayFail: []string{"node-02"}},
		},
	}
}

func TestCheck_JoinerGivenTheConfigInForceAfterItsRolloutEndedIsNoViolation(t *testing.T) {
	o := healthy()
	o.ConfigWrites = append(o.ConfigWrites,
		KVOp{Key: "node-02.backup", Revision: 7, At: at(9), Desired: &sluicev1.DesiredConfig{Node: "node-02", Rollout: "r1", Fingerprint: "fp-a2", LeaderEpoch: 5}},
		KVOp{Key: "node-02.desired", Revision: 8, At: at(9),
			Desired: &sluicev1.DesiredConfig{Node: "node-02", Rollout: "r1", Fingerprint: "fp-a2", LeaderEpoch: 9, WrittenAt: timestamppb.New(at(9))}})
	if vs := Check(o); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
}

// A failing node whose heartbeats stopped (a server stopped under it) is
// rightly skipped as departed; the rollout may then end within the budget.
// Only a schedule that can stop heartbeats excuses it.
func TestCheck_FailingNodeSkippedAsDeparted(t *testing.T) {
	skippedWithinBudget := func(lapse bool) *Observation {
		o := healthy()
		r := rollout(o, "r1")
		r.Skipped = []*sluicev1.NodeOutcome{{Node: "node-01"}}
		o.Expect["r1"] = Expectation{Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK},
			MayFail: []string{"node-01"}, NodesMayLapse: lapse}
		return o
	}
	isOutcome := func(v Violation) bool { return v.Invariant == "Outcome" }
	if vs := Check(skippedWithinBudget(true)); slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("heartbeats could stop: want no Outcome violation, got %v", vs)
	}
	if vs := Check(skippedWithinBudget(false)); !slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("nothing could stop heartbeats: want an Outcome violation, got %v", vs)
	}
}

// A rollout every node of which lapsed before it was configured ends
// Aborted, not Succeeded; only a schedule that can stop heartbeats excuses
// the scenario's Succeeded.
func TestCheck_RolloutWhoseEveryNodeLapsedMayEndAborted(t *testing.T) {
	allSkipped := func(lapse bool) *Observation {
		o := healthy()
		r := rollout(o, "r1")
		r.Phase, r.Reason = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "no node was provisioned: the 1 node(s) it was for left"
		r.Skipped = []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_SKIPPED}}
		r.Counts = &sluicev1.RolloutCounts{Total: 1, Skipped: 1}
		o.Expect["r1"] = Expectation{Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}, NodesMayLapse: lapse}
		return o
	}
	isOutcome := func(v Violation) bool { return v.Invariant == "Outcome" }
	if vs := Check(allSkipped(true)); slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("heartbeats could stop: want no Outcome violation, got %v", vs)
	}
	if vs := Check(allSkipped(false)); !slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("nothing could stop heartbeats: want an Outcome violation, got %v", vs)
	}
}

func rollout(o *Observation, id string) *sluicev1.Rollout {
	for _, r := range o.Rollouts {
		if r.GetId() == id {
			return r
		}
	}
	panic(id)
}

func TestCheck_CorrectRunHasNoViolation(t *testing.T) {
	if vs := Check(healthy()); len(vs) != 0 {
		t.Fatalf("violations in a correct run: %v", vs)
	}
}

// Every check must be able to fail: each case breaks one thing in a correct
// run and names the invariant that must catch it.
func TestCheck_EachBrokenInvariantIsReported(t *testing.T) {
	tests := []struct {
		name  string
		given func(o *Observation)
		want  string // invariant
		node  string
	}{
		{name: "not quiescent", given: func(o *Observation) { o.NotQuiescent = []string{"node-01 is provisioning"} }, want: "I2"},
		{name: "an event of sluice's own shown as unreadable", given: func(o *Observation) {
			o.Misread = []string{`#7 on sluice.events.node.node-01: type "WaveStarted" is not a node event any role may publish`}
		}, want: "I11"},
		{name: "rollout still progressing at rest", given: func(o *Observation) {
			rollout(o, "r2").Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
		}, want: "I2"},
		{name: "past its progress deadline", given: func(o *Observation) {
			rollout(o, "r2").LeaderTime = durationpb.New(time.Minute)
		}, want: "I2"},
		{name: "node runs neither desired nor backup", given: func(o *Observation) { o.Nodes[0].OnDisk = "fp-other" }, want: "I1", node: "node-01"},
		{name: "node reverted to the empty config", given: func(o *Observation) {
			o.Nodes[1].OnDisk, o.Nodes[1].Desired.Fingerprint, o.Nodes[1].Status.AppliedFingerprint = "empty", "empty", "empty"
		}, want: "I1", node: "node-02"},
		{name: "node left unconfigured although a config is in force", given: func(o *Observation) {
			o.Nodes[1] = NodeObs{Name: "node-02", Live: true}
		}, want: "I1", node: "node-02"},
		{name: "status lies about what is in force", given: func(o *Observation) { o.Nodes[0].Status.AppliedFingerprint = "fp-b1" }, want: "I1", node: "node-01"},
		{name: "invalid report missing from the record", given: func(o *Observation) {
			r := rollout(o, "r2")
			r.Failures, r.Counts.Failed = nil, 0
		}, want: "I3", node: "node-02"},
		{name: "provisioned node recorded invalid", given: func(o *Observation) {
			r := rollout(o, "r2")
			r.Failures = append(r.Failures, &sluicev1.NodeOutcome{Node: "node-01", Fingerprint: "fp-b1", Result: sluicev1.NodeResult_NODE_RESULT_INVALID, FailedCheck: "connectivity"})
			r.Counts.Failed = 2
			o.Fingerprints["fp-b1"] = &sluicev1.InvalidFingerprint{Node: "node-01", Check: "c", Output: "o"}
		}, want: "I3", node: "node-01"},
		{name: "failed fingerprint not recorded", given: func(o *Observation) { delete(o.Fingerprints, "fp-b2") }, want: "I4", node: "node-02"},
		{name: "timed-out fingerprint recorded without output", given: func(o *Observation) {
			r := rollout(o, "r2")
			r.Failures[0].Result = sluicev1.NodeResult_NODE_RESULT_TIMED_OUT
			o.StatusWrites = o.StatusWrites[:1]
			o.Fingerprints["fp-b2"].Output = ""
		}, want: "I4", node: "node-02"},
		{name: "reaper deleted a node of the active rollout", given: func(o *Observation) {
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-02.backup", Revision: 7, At: at(6.5), Delete: true})
		}, want: "I5", node: "node-02"},
		{name: "deposed leader's write took effect", given: func(o *Observation) {
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-02.desired", Revision: 7, At: at(7.1),
				Desired: &sluicev1.DesiredConfig{Node: "node-02", Rollout: "r2", Fingerprint: "fp-b2", LeaderEpoch: 5}})
		}, want: "I6", node: "node-02"},
		{name: "deposed leader rewrote a record", given: func(o *Observation) {
			o.RolloutWrites = append(o.RolloutWrites[:3], KVOp{Key: "r2", Revision: 4, At: at(6), Rollout: &sluicev1.Rollout{Id: "r2", LeaderEpoch: 5,
				Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING}}, KVOp{Key: "r2", Revision: 5, At: at(8), Rollout: rollout(o, "r2")})
		}, want: "I6"},
		{name: "rollout started twice", given: func(o *Observation) {
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutStarted", Rollout: "r1"})
		}, want: "Once"},
		{name: "terminal record rewritten", given: func(o *Observation) {
			o.RolloutWrites = append(o.RolloutWrites, KVOp{Key: "r1", Revision: 5, At: at(9), Rollout: &sluicev1.Rollout{Id: "r1", LeaderEpoch: 9,
				Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, Reason: "refused"}})
		}, want: "Once"},
		{name: "node given the target of a rolled-back rollout after it ended", given: func(o *Observation) {
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-02.desired", Revision: 7, At: at(9),
				Desired: &sluicev1.DesiredConfig{Node: "node-02", Rollout: "r2", Fingerprint: "fp-b2", LeaderEpoch: 9, WrittenAt: timestamppb.New(at(9))}})
		}, want: "Once", node: "node-02"},
		{name: "wrong outcome", given: func(o *Observation) {
			rollout(o, "r1").Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED
		}, want: "Outcome"},
		{name: "a node the scenario never fails is recorded failed", given: func(o *Observation) {
			x := o.Expect["r2"]
			x.MayFail = nil
			o.Expect["r2"] = x
		}, want: "Outcome", node: "node-02"},
		{name: "a failing node within the budget not recorded", given: func(o *Observation) {
			o.Expect["r1"] = Expectation{MayFail: []string{"node-01"}, AllFail: true}
		}, want: "Outcome", node: "node-01"},
		{name: "failed does not count a refused node", given: func(o *Observation) {
			r := rollout(o, "r1")
			r.Phase, r.Failures = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, []*sluicev1.NodeOutcome{{Node: "node-01", Fingerprint: "fp-b2", Result: sluicev1.NodeResult_NODE_RESULT_REFUSED}}
			o.Expect["r1"] = Expectation{}
		}, want: "Counts"},
		{name: "failed does not count a timeout", given: func(o *Observation) {
			rollout(o, "r2").Counts.Failed = 0
		}, want: "Counts"},
		{name: "a node the forward counts leave out", given: func(o *Observation) {
			rollout(o, "r2").Counts.Provisioned = 0
		}, want: "Counts"},
		{name: "reverted count without events", given: func(o *Observation) {
			rollout(o, "r2").Counts.Reverted = 1
		}, want: "Counts"},
		{name: "reverted node without its event", given: func(o *Observation) {
			o.Events = slices.DeleteFunc(o.Events, func(e *sluicev1.Event) bool { return e.GetType() == "NodeReverted" && e.GetNode() == "node-02" })
		}, want: "Counts"},
		// Version skew (skew.go): node-02's agent is of the baseline release.
		{name: "an old agent written a config needing a feature it does not read", given: func(o *Observation) {
			o.Nodes[1].Features = []string{}
			o.ConfigWrites[4].Desired.BakeChecks = &sluicev1.BakeChecks{Passes: 1}
		}, want: "Skew", node: "node-02"},
		{name: "a fingerprint recorded invalid from an agent that could not read it", given: func(o *Observation) {
			o.Nodes[1].Features = []string{}
			o.ConfigWrites[4].Desired.Features = []string{"bakeChecks"}
		}, want: "I9", node: "node-02"},
		{name: "a fingerprint recorded invalid from an agent that reported it INCOMPATIBLE", given: func(o *Observation) {
			o.Nodes[1].Features = []string{}
			o.ConfigWrites = slices.DeleteFunc(o.ConfigWrites, func(w KVOp) bool { return w.Desired.GetFingerprint() == "fp-b2" })
			o.StatusWrites[1].Phase = sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE
		}, want: "I9", node: "node-02"},
		{name: "a fingerprint recorded invalid from a node that could not apply it (node fault)", given: func(o *Observation) {
			o.StatusWrites[1].NodeFault = "frr applier: before applying anything: FRR is not running"
			o.Fingerprints["fp-b2"].Rollout = "r2"
		}, want: "I9", node: "node-02"},
		{name: "an old agent's node not listed INCOMPATIBLE by a rollout that ended in force", given: func(o *Observation) {
			o.Nodes[0].Features = []string{}
			x := o.Expect["r1"]
			x.Incompatible = []string{"node-01"}
			o.Expect["r1"] = x
		}, want: "Skew", node: "node-01"},
		{name: "a node listed INCOMPATIBLE whose agent reads every feature", given: func(o *Observation) {
			r := rollout(o, "r1")
			r.Skipped = []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE, Message: "its agent does not read bakeChecks"}}
			r.Counts.Skipped = 1
		}, want: "Skew", node: "node-01"},
		{name: "a rollout its old agents cannot read ends in force instead of being refused", given: func(o *Observation) {
			o.Nodes[0].Features = []string{}
			r := rollout(o, "r1")
			r.Skipped = []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE}}
			r.Counts = &sluicev1.RolloutCounts{Total: 2, Provisioned: 1, Skipped: 1}
			o.Expect["r1"] = Expectation{Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED}, Incompatible: []string{"node-01"}, Refuse: true}
		}, want: "Outcome"},
		{name: "a refused rollout that does not list its old agents", given: func(o *Observation) {
			o.Nodes[0].Features = []string{}
			r := rollout(o, "r1")
			r.Phase, r.Reason = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "refused before touching any node: …"
			o.Expect["r1"] = Expectation{Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED}, Incompatible: []string{"node-01"}, Refuse: true}
		}, want: "Skew", node: "node-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := healthy()
			tt.given(o)
			vs := Check(o)
			found := slices.ContainsFunc(vs, func(v Violation) bool {
				return v.Invariant == tt.want && (tt.node == "" || v.Node == tt.node)
			})
			if !found {
				t.Fatalf("want a %s violation (node %q); got %v", tt.want, tt.node, vs)
			}
		})
	}
}

func TestPick_SameSeedSameScenario(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		a, b := Pick(seed), Pick(seed)
		if a.Describe() != b.Describe() {
			t.Fatalf("seed %d picked two scenarios:\n%s\n%s", seed, a.Describe(), b.Describe())
		}
		if a.Nodes < 3 || a.Nodes > 12 {
			t.Errorf("seed %d: %d nodes, want 3-12", seed, a.Nodes)
		}
		for _, f := range a.Faults {
			if f.Kind == AgentLeave && a.Changes[f.Change].Behaviour[f.Node] != Healthy {
				t.Errorf("seed %d: %s leaves during a change it fails", seed, f.Node)
			}
		}
	}
}

// A node reaped while away is configured afresh with the config in force
// when it comes back (no backup on record); if that config fails on it, its
// agent keeps its own last-good, which its status names (chaos seed 342).
// Running anything else, or a config it never ran, is still a violation.
func TestCheck_ReapedNodeFailingTheConfigInForceKeepsItsOwnLastGood(t *testing.T) {
	reapedAndFailed := func(ranOld bool) *Observation {
		o := healthy()
		n := &o.Nodes[1]
		n.Backup = nil
		n.Desired = &sluicev1.DesiredConfig{Node: "node-02", Rollout: "r1", Fingerprint: "fp-a2", LeaderEpoch: 9}
		n.OnDisk = "fp-old"
		n.Status = &sluicev1.NodeStatus{Node: "node-02", Rollout: "r1", Fingerprint: "fp-a2", AppliedFingerprint: "fp-old",
			Phase: sluicev1.NodePhase_NODE_PHASE_INVALID, LastUpdate: timestamppb.New(at(9.5))}
		if ranOld {
			n.Applies = append([]Apply{{At: at(0.1), Fingerprint: "fp-old"}}, n.Applies...)
		}
		return o
	}
	isI1 := func(v Violation) bool { return v.Invariant == "I1" }
	if vs := Check(reapedAndFailed(true)); slices.ContainsFunc(vs, isI1) {
		t.Errorf("it runs a config it ran before, as its status says: want no I1 violation, got %v", vs)
	}
	if vs := Check(reapedAndFailed(false)); !slices.ContainsFunc(vs, isI1) {
		t.Errorf("it runs a config it never ran: want an I1 violation, got %v", vs)
	}
}

// A node reaped while away whose config in force is recorded invalid (it
// failed on a node with the same config) is given nothing and keeps what it
// ran (chaos seed 1153); with a config in force that is not known bad, the
// same node is a violation.
func TestCheck_NodeWhoseConfigInForceIsKnownBadKeepsWhatItRan(t *testing.T) {
	unconfigured := func(knownBad bool) *Observation {
		o := healthy()
		n := &o.Nodes[1]
		n.Desired, n.Backup, n.Status = nil, nil, nil
		n.OnDisk = "fp-old"
		n.Applies = append([]Apply{{At: at(0.1), Fingerprint: "fp-old"}}, n.Applies...)
		if knownBad {
			o.Fingerprints["fp-a2"] = &sluicev1.InvalidFingerprint{Fingerprint: "fp-a2", Node: "node-09", Check: "ping", Output: "loss"}
		}
		return o
	}
	isI1 := func(v Violation) bool { return v.Invariant == "I1" }
	if vs := Check(unconfigured(true)); slices.ContainsFunc(vs, isI1) {
		t.Errorf("its config in force is known bad: want no I1 violation, got %v", vs)
	}
	if vs := Check(unconfigured(false)); !slices.ContainsFunc(vs, isI1) {
		t.Errorf("its config in force is fine: want an I1 violation, got %v", vs)
	}
}

// A node reaped while away comes back when the revision in force holds
// garbage nobody can rewrite: no coordinator can render its config, so it
// keeps what it ran, and that is no violation when a coordinator said so
// naming it (NodeNotConfigured; virtual seed 230). Silence, or a revision
// that is readable, is still a violation.
func TestCheck_NodeWhoseRevisionInForceIsUnreadableKeepsWhatItRan_WhenToldSo(t *testing.T) {
	unconfigured := func(spoiled, told bool) *Observation {
		o := healthy()
		rev := ""
		for _, r := range o.Rollouts {
			if r.GetId() == o.LastApplied.GetRollout() {
				r.Revision = "rev-in-force"
				rev = r.GetRevision()
			}
		}
		if rev == "" {
			t.Fatal("healthy(): no record of the last-applied rollout")
		}
		n := &o.Nodes[1]
		n.Desired, n.Backup, n.Status = nil, nil, nil
		n.OnDisk = "fp-old"
		n.Applies = append([]Apply{{At: at(0.1), Fingerprint: "fp-old"}}, n.Applies...)
		if spoiled {
			o.Spoiled = append(o.Spoiled, Spoil{Bucket: contract.BucketRevisions, Key: rev, Revision: 9, What: "truncated", AtRest: true})
		}
		if told {
			o.Events = append(o.Events, &sluicev1.Event{Kind: contract.KindNode, Id: n.Name, Type: "NodeNotConfigured", Node: n.Name, Revision: rev})
		}
		return o
	}
	isI1 := func(v Violation) bool { return v.Invariant == "I1" }
	if vs := Check(unconfigured(true, true)); slices.ContainsFunc(vs, isI1) {
		t.Errorf("the revision in force unreadable, and said so: want no I1 violation, got %v", vs)
	}
	if vs := Check(unconfigured(true, false)); !slices.ContainsFunc(vs, isI1) {
		t.Errorf("the revision in force unreadable, nothing said: want an I1 violation, got %v", vs)
	}
	if vs := Check(unconfigured(false, true)); !slices.ContainsFunc(vs, isI1) {
		t.Errorf("the revision in force readable: want an I1 violation, got %v", vs)
	}
}

// A node listed twice — Invalid on its forward target, then its revert
// failed — is listed (chaos seed 75); a node the coordinator gave up on
// (revert failed) may report on its forward target after the rollout ended
// for want of it; a node listed only as skipped may not.
func TestCheck_I3_ForwardAndRevertOutcomesOfOneNode(t *testing.T) {
	withFailures := func(fs ...*sluicev1.NodeOutcome) *Observation {
		o := healthy()
		r := rollout(o, "r2")
		r.Failures = fs
		r.Counts.Failed = 1
		return o
	}
	isI3 := func(v Violation) bool { return v.Invariant == "I3" }
	invalid := &sluicev1.NodeOutcome{Node: "node-02", Fingerprint: "fp-b2", Result: sluicev1.NodeResult_NODE_RESULT_INVALID}
	revertFailed := &sluicev1.NodeOutcome{Node: "node-02", Result: sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED, FailedCheck: "revert"}
	skipped := &sluicev1.NodeOutcome{Node: "node-02", Result: sluicev1.NodeResult_NODE_RESULT_SKIPPED}
	if vs := Check(withFailures(invalid, revertFailed)); slices.ContainsFunc(vs, isI3) {
		t.Errorf("listed Invalid, then its revert failed: want no I3 violation, got %v", vs)
	}
	if vs := Check(withFailures(revertFailed)); slices.ContainsFunc(vs, isI3) {
		t.Errorf("the coordinator gave up on its revert: want no I3 violation, got %v", vs)
	}
	if vs := Check(withFailures(skipped)); !slices.ContainsFunc(vs, isI3) {
		t.Errorf("listed only as skipped: want an I3 violation, got %v", vs)
	}
}

// A term that found node-02 gone at its load (lapsed while no coordinator
// led) and ended the rollout in the step that resumed it decided on what it
// read: node-02's Invalid report, made after that term began, is in no
// record (chaos seed 27 under load). A report the load could read, a
// rollout ended in a later step, or a node skipped as seen leaving is still
// an I3 violation.
func TestCheck_I3_AReportAfterTheLoadThatSkippedTheNode(t *testing.T) {
	const lapsed = "node left (presence lease expired) while no coordinator led, before finishing"
	// node-02 reported its target Invalid at 6.2 (healthy); r2 ends at 8.
	run := func(termAt, resumedAt float64, why string) *Observation {
		o := healthy()
		r := rollout(o, "r2")
		r.Failures = nil
		r.Skipped = []*sluicev1.NodeOutcome{{Node: "node-02", Result: sluicev1.NodeResult_NODE_RESULT_SKIPPED, Message: why}}
		r.Counts.Failed, r.Counts.Skipped = 0, 1
		o.Events = append(o.Events,
			&sluicev1.Event{Kind: contract.KindLeader, Type: contract.EventLeadershipAcquired, Time: timestamppb.New(at(termAt))},
			&sluicev1.Event{Type: "RolloutResumed", Rollout: "r2", Time: timestamppb.New(at(resumedAt))})
		return o
	}
	isI3 := func(v Violation) bool { return v.Invariant == "I3" }
	tests := []struct {
		name   string
		given  *Observation
		wantI3 bool
	}{
		{name: "reported after the term began; ended in the step of its load", given: run(6, 8, lapsed)},
		{name: "reported before the term began: its load read it", given: run(6.5, 8, lapsed), wantI3: true},
		{name: "ended in a later step than the load's", given: run(6, 7, lapsed), wantI3: true},
		{name: "skipped as seen leaving, not at a load", given: run(6, 8, "node left (presence lease expired) before finishing"), wantI3: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := Check(tt.given)
			if got := slices.ContainsFunc(vs, isI3); got != tt.wantI3 {
				t.Fatalf("want an I3 violation: %v; got %v", tt.wantI3, vs)
			}
		})
	}
}

// withRegistry adds to a correct run a registry owning routingtable.reg-1
// and routingtable.reg-2, whose files the harness dropped at 3s; reg-1
// came back at 4s, reg-2 at tail seconds. The intents bucket saw them
// created at 0.1s and unmarked since, unless marks add writes that mark
// reg-1 or reg-2 at the given times.
func withRegistry(tail float64, marks map[string]float64) *Observation {
	o := healthy()
	o.Registry = &RegistryObs{Name: "gitops", Settle: 6 * time.Second, Intents: []string{"routingtable.reg-1", "routingtable.reg-2"},
		Absent: map[string][]Span{"routingtable.reg-1": {{From: at(3), To: at(4)}}, "routingtable.reg-2": {{From: at(3), To: at(tail)}}}}
	stored := func(key string, marked bool) *sluicev1.StoredIntent {
		return &sluicev1.StoredIntent{Source: "gitops", MarkedForDeletion: marked,
			Intent: &sluicev1.Intent{Name: key[len("routingtable."):], Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 60}}}}
	}
	for i, key := range o.Registry.Intents {
		o.IntentWrites = append(o.IntentWrites, KVOp{Key: key, Revision: uint64(i + 1), At: at(0.1), Intent: stored(key, false)})
	}
	for _, key := range sortedKeys(marks) {
		o.IntentWrites = append(o.IntentWrites, KVOp{Key: key, Revision: uint64(len(o.IntentWrites) + 1), At: at(marks[key]), Intent: stored(key, true)})
	}
	return o
}

func TestCheck_I7_NoDeletionOnAPartialAnswer(t *testing.T) {
	tests := []struct {
		name   string
		given  *Observation
		wantI7 bool
	}{
		{name: "files dropped and back within the settle period, nothing marked", given: withRegistry(5, nil)},
		{name: "a file gone for longer than the settle period, marked after it (and after the answer last grew)", given: withRegistry(12, map[string]float64{"routingtable.reg-2": 10.5})},
		{name: "marked a settle period after its file left, but the answer grew since", given: withRegistry(12, map[string]float64{"routingtable.reg-2": 9.5}), wantI7: true},
		{name: "marked within its absence, back within the settle period", given: withRegistry(5, map[string]float64{"routingtable.reg-1": 3.5}), wantI7: true},
		{name: "marked before the settle period ran out, back later", given: withRegistry(12, map[string]float64{"routingtable.reg-2": 5}), wantI7: true},
		{name: "marked just after it came back (the answer before was partial)", given: withRegistry(5, map[string]float64{"routingtable.reg-1": 4.01}), wantI7: true},
		{name: "marked although its file never left", given: withRegistry(5, map[string]float64{"routingtable.reg-1": 1}), wantI7: true},
		{name: "marked: only the configurator's event tells", wantI7: true, given: func() *Observation {
			o := withRegistry(5, nil)
			o.Events = append(o.Events, &sluicev1.Event{Type: "IntentMarkedForDeletion", Id: "routingtable.reg-2", Time: timestamppb.New(at(4.5))})
			return o
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := Check(tt.given)
			if got := slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == "I7" }); got != tt.wantI7 {
				t.Fatalf("want an I7 violation: %v; got %v", tt.wantI7, vs)
			}
		})
	}
}

// withRefill is withRegistry refilling slowly: reg-1 and reg-2 gone from 3
// s, back at 4 and 8 (each gap shorter than the 6 s settle period), reg-3
// gone from 3 s until 30 s; marks as given.
func withRefill(marks map[string]float64) *Observation {
	o := withRegistry(8, marks)
	r := o.Registry
	r.Intents = append(r.Intents, "routingtable.reg-3")
	r.Absent["routingtable.reg-3"] = []Span{{From: at(3), To: at(30)}}
	o.IntentWrites = append([]KVOp{{Key: "routingtable.reg-3", Revision: 100, At: at(0.1), Intent: &sluicev1.StoredIntent{Source: "gitops",
		Intent: &sluicev1.Intent{Name: "reg-3", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 62}}}}}}, o.IntentWrites...)
	return o
}

// While a registry refills, a growing answer starts the settle period of
// what is still missing again: a mark needs the whole period without a
// file coming back (issue 47: the rule a slow refill reaches).
func TestCheck_I7_NoDeletionWhileTheRegistryRefills(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mark   float64
		wantI7 bool
	}{
		{"marked 4 s after the answer last grew (reg-2 back at 8)", 12, true},
		{"marked 6.5 s after the answer last grew: the whole settle period", 14.5, false},
		{"marked 0.5 s after reg-2 came back (perhaps not yet seen), 6.5 s after reg-1", 8.5, true},
		{"marked 6 s after its file left, the answer growing since", 9.1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := Check(withRefill(map[string]float64{"routingtable.reg-3": tt.mark}))
			if got := slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == "I7" }); got != tt.wantI7 {
				t.Fatalf("want an I7 violation: %v; got %v", tt.wantI7, vs)
			}
		})
	}
}

// A key that still holds garbage at rest (garbage-value) is judged by what
// its owner stored there before: the checks hold for it as for any key, and
// still fail when that value is wrong. Garbage rewritten since changes
// nothing.
func TestCheck_SpoiledKeysAreJudgedByTheirOwnersLastValue(t *testing.T) {
	spoil := func(o *Observation, bucket, key string, before proto.Message, atRest bool) {
		o.Spoiled = append(o.Spoiled, Spoil{Bucket: bucket, Key: key, Revision: 99, At: at(9), What: "empty", Before: before, AtRest: atRest})
	}
	tests := []struct {
		name  string
		given func(o *Observation)
		want  string // invariant; "" = none
		node  string
	}{
		{name: "desired and status hold garbage", given: func(o *Observation) {
			n := &o.Nodes[0]
			spoil(o, "sluice-nodeconfigs", "node-01.desired", n.Desired, true)
			spoil(o, "sluice-status", "node-01", n.Status, true)
			n.Desired, n.Status = nil, nil
		}},
		{name: "desired holds garbage; the config before it is not what the node runs", given: func(o *Observation) {
			n := &o.Nodes[0]
			spoil(o, "sluice-nodeconfigs", "node-01.desired", n.Desired, true)
			n.Desired, n.OnDisk, n.Status.AppliedFingerprint = nil, "fp-other", "fp-other"
		}, want: "I1", node: "node-01"},
		{name: "status holds garbage; the status before it lies", given: func(o *Observation) {
			n := &o.Nodes[0]
			before := proto.Clone(n.Status).(*sluicev1.NodeStatus)
			before.AppliedFingerprint = "fp-b1"
			spoil(o, "sluice-status", "node-01", before, true)
			n.Status = nil
		}, want: "I1", node: "node-01"},
		{name: "a failed fingerprint's record holds garbage", given: func(o *Observation) {
			spoil(o, "sluice-fingerprints", "fp-b2", o.Fingerprints["fp-b2"], true)
			delete(o.Fingerprints, "fp-b2")
		}},
		{name: "a failed fingerprint's record held garbage, since deleted", given: func(o *Observation) {
			spoil(o, "sluice-fingerprints", "fp-b2", o.Fingerprints["fp-b2"], false)
			delete(o.Fingerprints, "fp-b2")
		}, want: "I4", node: "node-02"},
		{name: "last-applied and a rollout record hold garbage", given: func(o *Observation) {
			spoil(o, "sluice-rollouts", "last-applied", o.LastApplied, true)
			spoil(o, "sluice-rollouts", "r1", rollout(o, "r1"), true)
			o.LastApplied, o.Rollouts = nil, o.Rollouts[1:]
		}},
		{name: "last-applied holds garbage; the node does not run the config in force before it", given: func(o *Observation) {
			spoil(o, "sluice-rollouts", "last-applied", o.LastApplied, true)
			o.LastApplied = nil
			o.Nodes[0].OnDisk, o.Nodes[0].Status.AppliedFingerprint, o.Nodes[0].Desired.Fingerprint = "fp-b1", "fp-b1", "fp-b1"
		}, want: "I1", node: "node-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := healthy()
			tt.given(o)
			vs := Check(o)
			if tt.want == "" {
				if len(vs) > 0 {
					t.Fatalf("violations: %v", vs)
				}
				return
			}
			if !slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == tt.want && (tt.node == "" || v.Node == tt.node) }) {
				t.Fatalf("want a %s violation (node %q); got %v", tt.want, tt.node, vs)
			}
		})
	}
}

// A node whose desired key got garbage while a rollout ran may never have
// read its config, and time out: that is no Outcome violation. A node
// whose key got garbage after the rollout ended, or that is recorded
// Invalid, still is.
func TestCheck_DesiredSpoiledWhileTheRolloutRanMayTimeOut(t *testing.T) {
	timedOut := func(spoiledAt float64) *Observation {
		o := healthy()
		r := rollout(o, "r1")
		r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED
		r.Failures = []*sluicev1.NodeOutcome{{Node: "node-01", Fingerprint: "fp-a1", Result: sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, FailedCheck: "deadline"}}
		r.Counts.Failed = 1
		o.Fingerprints["fp-a1"] = &sluicev1.InvalidFingerprint{Node: "node-01", Check: "deadline", Output: "no report"}
		o.Spoiled = []Spoil{{Bucket: "sluice-nodeconfigs", Key: "node-01.desired", Revision: 3, At: at(spoiledAt), What: "empty"}}
		return o
	}
	isOutcome := func(v Violation) bool { return v.Invariant == "Outcome" }
	if vs := Check(timedOut(0.6)); slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("its desired key got garbage while r1 ran: want no Outcome violation, got %v", vs)
	}
	if vs := Check(timedOut(2.5)); !slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("its desired key got garbage after r1 ended: want an Outcome violation, got %v", vs)
	}
	invalid := timedOut(0.6)
	rollout(invalid, "r1").Failures[0].Result = sluicev1.NodeResult_NODE_RESULT_INVALID
	if vs := Check(invalid); !slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("recorded Invalid: want an Outcome violation, got %v", vs)
	}
}

// Every revision rolled out from the driver's first change on holds every
// intent the driver declares; a rollout before it (a registry's first sync)
// need not.
func TestCheck_I8_RevisionsHoldEveryDeclaredIntent(t *testing.T) {
	declared := func(r2 []string) *Observation {
		o := healthy()
		o.Declared, o.DeclaredFrom = []string{"layer2network.tenant-a", "routingtable.fleet-wide"}, 2
		rollout(o, "r1").Generation, rollout(o, "r2").Generation = 1, 2
		o.RevisionIntents = map[string][]string{"r1": {"routingtable.reg-1"}, "r2": r2}
		return o
	}
	isI8 := func(v Violation) bool { return v.Invariant == "I8" }
	if vs := Check(declared([]string{"layer2network.tenant-a", "routingtable.fleet-wide", "routingtable.reg-1"})); slices.ContainsFunc(vs, isI8) {
		t.Errorf("r2's revision holds every declared intent: want no I8 violation, got %v", vs)
	}
	if vs := Check(declared([]string{"routingtable.fleet-wide"})); !slices.ContainsFunc(vs, isI8) {
		t.Errorf("r2's revision lacks layer2network.tenant-a: want an I8 violation, got %v", vs)
	}
}

// A node reverted by one term whose desired key then got garbage cannot be
// known reverted by the next term: the record may count it out. Any other
// node's NodeReverted event without a count is still a violation.
func TestCheck_RevertedNodeWhoseDesiredKeyGotGarbageMayBeUncounted(t *testing.T) {
	uncounted := func(spoiled string) *Observation {
		o := healthy()
		rollout(o, "r2").Counts.Reverted = 1
		o.Spoiled = []Spoil{{Bucket: "sluice-nodeconfigs", Key: spoiled + ".desired", Revision: 7, At: at(7.2), What: "truncated"}}
		return o
	}
	isCounts := func(v Violation) bool { return v.Invariant == "Counts" }
	if vs := Check(uncounted("node-01")); slices.ContainsFunc(vs, isCounts) {
		t.Errorf("node-01's desired key got garbage while r2 ran: want no Counts violation, got %v", vs)
	}
	if vs := Check(uncounted("node-03")); !slices.ContainsFunc(vs, isCounts) {
		t.Errorf("no reverted node's key got garbage: want a Counts violation, got %v", vs)
	}
}

// A rollout whose revision got garbage before it ended may end Aborted (a
// new term cannot render its targets); without that, Aborted is still an
// Outcome violation.
func TestCheck_RolloutWhoseRevisionGotGarbageMayEndAborted(t *testing.T) {
	aborted := func(spoiled bool) *Observation {
		o := healthy()
		r := rollout(o, "r1")
		r.Phase, r.Revision = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, "rev-1"
		if spoiled {
			o.Spoiled = []Spoil{{Bucket: "sluice-revisions", Key: "rev-1", Revision: 4, At: at(1), What: "truncated"}}
		}
		return o
	}
	isOutcome := func(v Violation) bool { return v.Invariant == "Outcome" }
	if vs := Check(aborted(true)); slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("its revision got garbage while it ran: want no Outcome violation, got %v", vs)
	}
	if vs := Check(aborted(false)); !slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("nothing happened to its revision: want an Outcome violation, got %v", vs)
	}
}

// So may one whose record got garbage (a new term stops it as an abort:
// rollout.LostRollout); garbage in another rollout's record changes nothing.
func TestCheck_RolloutWhoseRecordGotGarbageMayEndAborted(t *testing.T) {
	aborted := func(key string) *Observation {
		o := healthy()
		r := rollout(o, "r1")
		r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED
		o.Spoiled = []Spoil{{Bucket: "sluice-rollouts", Key: key, Revision: 4, At: at(1), What: "truncated"}}
		return o
	}
	isOutcome := func(v Violation) bool { return v.Invariant == "Outcome" }
	if vs := Check(aborted("r1")); slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("its record got garbage while it ran: want no Outcome violation, got %v", vs)
	}
	if vs := Check(aborted("r2")); !slices.ContainsFunc(vs, isOutcome) {
		t.Errorf("another rollout's record got garbage: want an Outcome violation, got %v", vs)
	}
}

// A rollout refused before touching any node counts its refused nodes as
// failed (docs/rollouts.md).
func TestCheck_RefusedNodesCountAsFailed(t *testing.T) {
	o := healthy()
	r := rollout(o, "r1")
	r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED
	r.Failures = []*sluicev1.NodeOutcome{{Node: "node-01", Fingerprint: "fp-b2", Result: sluicev1.NodeResult_NODE_RESULT_REFUSED}}
	r.Counts = &sluicev1.RolloutCounts{Total: 2, Failed: 1, NotStarted: 1} // node-02 was never started
	o.Expect["r1"] = Expectation{}
	if vs := Check(o); slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == "Counts" }) {
		t.Fatalf("one node refused, counted failed: want no Counts violation, got %v", vs)
	}
}

// A stale desired config the harness wrote (stale-desired: a deposed
// leader's write landing) is no sluice write: the node is judged by the
// coordinator's write before it, so one that ignored it passes and one
// that applied it breaks I1 (issue 22, mutation 04); written by sluice,
// the same value breaks I6.
func TestCheck_StaleDesired_JudgedByTheCoordinatorsWriteBefore(t *testing.T) {
	stale := &sluicev1.DesiredConfig{Node: "node-01", Rollout: "r2", Fingerprint: "fp-b1", LeaderEpoch: 5, WrittenAt: timestamppb.New(at(4.5))}
	given := func(recorded, applied bool) *Observation {
		o := healthy()
		before := o.Nodes[0].Desired
		o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-01.desired", Revision: 7, At: at(9), Desired: stale})
		o.Nodes[0].Desired = stale // what the key holds at rest
		if recorded {
			o.Spoiled = []Spoil{{Bucket: "sluice-nodeconfigs", Key: "node-01.desired", Revision: 7, At: at(9), Stale: true, AtRest: true, Before: before}}
		}
		if applied {
			o.Nodes[0].OnDisk = "fp-b1"
			o.Nodes[0].Applies = append(o.Nodes[0].Applies, Apply{At: at(9.1), Fingerprint: "fp-b1", Rollout: "r2"})
		}
		return o
	}
	for _, tt := range []struct {
		name              string
		recorded, applied bool
		want              []string // invariants broken
	}{
		{name: "the agent ignored the harness's stale write", recorded: true},
		{name: "the agent applied the harness's stale write", recorded: true, applied: true, want: []string{"I1"}},
		{name: "sluice wrote it (no record of the harness's)", want: []string{"I6"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := Check(given(tt.recorded, tt.applied))
			for _, inv := range tt.want {
				if !has(vs, inv, "") {
					t.Errorf("want an %s violation, got %v", inv, vs)
				}
			}
			if len(tt.want) == 0 && len(vs) > 0 {
				t.Errorf("want no violation, got %v", vs)
			}
			if tt.recorded && has(vs, "I6", "") {
				t.Errorf("the harness's write is judged as sluice's: %v", vs)
			}
		})
	}
}

// A rollout the old agents cannot read is refused up front, also when a
// term resumed it before the refusal was stored (the leader stopped between
// the rollout's start and its refusal: chaos seed 148): no node was touched,
// and the resumed term refuses it too. One that skips them instead is an
// Outcome violation, resumed or not.
func TestCheck_Skew_ARefusalResumedByANewTermStillRefuses(t *testing.T) {
	skipped := func(resumed bool) *Observation {
		o := healthy()
		o.Nodes[0].Features = []string{}
		r := rollout(o, "r1")
		r.Skipped = []*sluicev1.NodeOutcome{{Node: "node-01", Result: sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE, Message: "its agent does not read bakeChecks"}}
		r.Counts = &sluicev1.RolloutCounts{Total: 2, Provisioned: 1, Skipped: 1}
		o.Expect["r1"] = Expectation{Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED}, Incompatible: []string{"node-01"}, Refuse: true}
		if resumed {
			o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutResumed", Rollout: "r1"})
		}
		return o
	}
	for _, resumed := range []bool{true, false} {
		if vs := Check(skipped(resumed)); !slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == "Outcome" }) {
			t.Errorf("resumed %v: want an Outcome violation (it should have been refused), got %v", resumed, vs)
		}
	}
}

// A failing node the rollout never wrote to, whose presence lapsed while no
// coordinator led, leaves no trace in the record but its total: the rollout
// may then end within the budget. Only a schedule that can stop heartbeats
// (or garbage over that node's presence) excuses it (chaos seed 103).
func TestCheck_FailingNodeDroppedUntracedByANewTerm(t *testing.T) {
	dropped := func(lapse, spoiled bool) *Observation {
		o := healthy()
		r := rollout(o, "r1")
		r.Counts = &sluicev1.RolloutCounts{Total: 1, Provisioned: 1}
		o.Expect["r1"] = Expectation{Phases: []sluicev1.RolloutPhase{sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK},
			MayFail: []string{"node-02"}, AllFail: true, NodesMayLapse: lapse}
		if spoiled {
			o.Spoiled = []Spoil{{Bucket: "sluice-nodes", Key: "node-02", At: at(0.2)}}
		}
		return o
	}
	isOutcome := func(v Violation) bool { return v.Invariant == "Outcome" && v.Rollout == "r1" }
	for _, tt := range []struct {
		lapse, spoiled, want bool
	}{{true, false, false}, {false, true, false}, {false, false, true}} {
		if got := slices.ContainsFunc(Check(dropped(tt.lapse, tt.spoiled)), isOutcome); got != tt.want {
			t.Errorf("heartbeats may lapse %v, presence spoiled %v: Outcome violation %v, want %v", tt.lapse, tt.spoiled, got, tt.want)
		}
	}
}

// Slow refills are drawn, each shape in the first 200 seeds, and each is
// what its shape says: every gap shorter than the settle period, together
// longer; a stall's last gap longer; a flap's file listed twice.
func TestPick_SlowRefillsAreDrawnAsTheirShapeSays(t *testing.T) {
	seen := map[string][]uint64{}
	for seed := uint64(1); seed <= 200; seed++ {
		for _, f := range Pick(seed).Faults {
			tr := f.Trickle
			if tr == nil || tr.Shape == "" {
				continue
			}
			seen[tr.Shape] = append(seen[tr.Shape], seed)
			var total time.Duration
			for i, g := range tr.Gaps {
				last := i == len(tr.Gaps)-1
				if g >= registrySettle && !(last && tr.Shape == "stall") {
					t.Errorf("seed %d: %s: gap %d is %s, not shorter than the settle period %s", seed, tr, i, g, registrySettle)
				}
				if last && tr.Shape == "stall" && g < registrySettle+registrySettle/2 {
					t.Errorf("seed %d: %s: a stall's last gap %s is not half a settle period longer than it", seed, tr, g)
				}
				if !last || tr.Shape != "stall" {
					total += g
				}
			}
			if tr.Shape != "stall" && total <= registrySettle {
				t.Errorf("seed %d: %s: the refill takes %s, not longer than the settle period %s", seed, tr, total, registrySettle)
			}
			twice := 0
			for i, b := range tr.Back {
				if slices.Index(tr.Back, b) != i {
					twice++
				}
			}
			if (tr.Shape == "flap") != (twice == 1) {
				t.Errorf("seed %d: %s: %d files listed twice", seed, tr, twice)
			}
		}
	}
	for _, shape := range []string{"refill", "stall", "flap"} {
		if len(seen[shape]) < 3 {
			t.Errorf("shape %s: seeds %v of the first 200; want 3 at least", shape, seen[shape])
		}
	}
	t.Logf("slow refills in seeds 1–200: %v", seen)
}

// A node fault (node_fault on every Invalid report of it) is listed as a
// failure but not recorded invalid (I9); I4 asks no record of it. The same
// report without node_fault, unrecorded, is an I4 violation.
func TestCheck_NodeFaultNotRecordedIsNoViolation(t *testing.T) {
	unrecorded := func(fault string) *Observation {
		o := healthy()
		o.StatusWrites[1].NodeFault = fault
		rollout(o, "r2").Failures[0].Message = "not recorded invalid: the node could not apply it (" + fault + ")"
		delete(o.Fingerprints, "fp-b2")
		return o
	}
	if vs := Check(unrecorded("frr applier: before applying anything: FRR is not running")); len(vs) != 0 {
		t.Errorf("a node fault left unrecorded: violations %v, want none", vs)
	}
	isI4 := func(v Violation) bool { return v.Invariant == "I4" }
	if vs := Check(unrecorded("")); !slices.ContainsFunc(vs, isI4) {
		t.Errorf("a config failure left unrecorded: violations %v, want I4", vs)
	}
}

// Registry holds are drawn in the first 200 seeds, confirmed and not, and
// each is what the held branch of the deletion rule needs: more files than
// the hold share (half) lets be pending, two at least, out longer than the
// settle period; only in registry seeds the partial-registry fault leaves
// alone.
func TestPick_RegistryHoldsAreMassDeletions(t *testing.T) {
	seen := map[bool][]uint64{}
	for seed := uint64(1); seed <= 200; seed++ {
		sc := Pick(seed)
		for _, f := range sc.Faults {
			h := f.Hold
			if h == nil {
				continue
			}
			seen[h.Confirm] = append(seen[h.Confirm], seed)
			if n := sc.Registry.Intents; len(h.Drop) < 2 || 2*len(h.Drop) <= n || len(h.Drop) > n {
				t.Errorf("seed %d: %s: drops %d of %d files, not more than half (two at least)", seed, h, len(h.Drop), n)
			}
			if h.For <= registrySettle {
				t.Errorf("seed %d: %s: out %s, not longer than the settle period %s", seed, h, h.For, registrySettle)
			}
			if slices.ContainsFunc(sc.Faults, func(f Fault) bool { return f.Kind == PartialRegistry }) {
				t.Errorf("seed %d: a registry hold beside a partial-registry fault", seed)
			}
		}
	}
	if len(seen[true]) < 3 || len(seen[false]) < 1 {
		t.Errorf("registry holds in seeds 1–200: confirmed %v, unconfirmed %v; want 3 and 1 at least", seen[true], seen[false])
	}
	t.Logf("registry holds in seeds 1–200: confirmed %v, unconfirmed %v", seen[true], seen[false])
}

// withHold is withRegistry with a third intent and a registry-hold: reg-1
// and reg-2 (two of three, more than the hold share) out from 20 s to 31
// s, the status holding their deletion from 21 s, confirmed at 30 s
// (confirmed false: none, they came back unconfirmed); marks as given.
func withHold(confirmed bool, marks map[string]float64) *Observation {
	o := withRegistry(5, nil)
	r := o.Registry
	r.Intents = append(r.Intents, "routingtable.reg-3")
	h := HoldObs{Intents: []string{"routingtable.reg-1", "routingtable.reg-2"}, Owned: 3, From: at(20), Held: at(21), Back: at(31)}
	if confirmed {
		h.Confirmed = at(30)
	}
	r.Holds = append(r.Holds, h)
	for _, key := range h.Intents {
		r.Absent[key] = append(r.Absent[key], Span{From: h.From, To: h.Back})
	}
	for _, key := range sortedKeys(marks) {
		o.IntentWrites = append(o.IntentWrites, KVOp{Key: key, Revision: uint64(len(o.IntentWrites) + 1), At: at(marks[key]),
			Intent: &sluicev1.StoredIntent{Source: "gitops", MarkedForDeletion: true,
				Intent: &sluicev1.Intent{Name: key[len("routingtable."):], Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 60}}}}})
	}
	return o
}

// A mass deletion is held until an operator confirms it, and the
// confirmation marks it (issue 47: the held and confirmed branches of the
// deletion rule).
func TestCheck_Hold_AMassDeletionWaitsForItsConfirmation(t *testing.T) {
	both := func(at float64) map[string]float64 {
		return map[string]float64{"routingtable.reg-1": at, "routingtable.reg-2": at}
	}
	for _, tt := range []struct {
		name     string
		given    *Observation
		wantHold bool
	}{
		{"held, confirmed, both marked after the confirmation", withHold(true, both(30.4)), false},
		{"held, never confirmed, nothing marked", withHold(false, nil), false},
		{"marked a settle period after the drop, before the confirmation (not held)", withHold(true, both(26.5)), true},
		{"marked while held, never confirmed", withHold(false, map[string]float64{"routingtable.reg-2": 27}), true},
		{"confirmed, and nothing marked", withHold(true, nil), true},
		{"confirmed, one of the two marked", withHold(true, map[string]float64{"routingtable.reg-1": 30.4}), true},
		{"confirmed, marked only long after", withHold(true, both(55)), true},
		{"the status never held it", func() *Observation {
			o := withHold(true, both(30.4))
			o.Registry.Holds[0].Held, o.Registry.Holds[0].Seen = time.Time{}, "state REGISTRY_STATE_SYNCED, held [], 2 pending"
			return o
		}(), true},
		{"garbage over the registry's status: not judged", func() *Observation {
			o := withHold(true, nil)
			o.Spoiled = append(o.Spoiled, Spoil{Bucket: contract.BucketRegistries, Key: "gitops", At: at(22)})
			return o
		}(), false},
		{"garbage over another key of the registries bucket: judged", func() *Observation {
			o := withHold(true, nil)
			o.Spoiled = append(o.Spoiled, Spoil{Bucket: contract.BucketRegistries, Key: "chaos-172", At: at(22), Fresh: true})
			return o
		}(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := Check(tt.given)
			if got := slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == "Hold" }); got != tt.wantHold {
				t.Fatalf("want a Hold violation: %v; got %v", tt.wantHold, vs)
			}
			if slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant != "Hold" }) && !tt.wantHold {
				t.Fatalf("want no violation; got %v", vs)
			}
		})
	}
}
