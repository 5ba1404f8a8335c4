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

func has(vs []Violation, inv, node string) bool {
	return slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == inv && (node == "" || v.Node == node) })
}

// checkCase is a change to healthy() and whether the result breaks the
// invariant under test.
type checkCase struct {
	name  string
	given func(o *Observation)
	want  bool
}

// runCases checks each case for a violation of inv (for node, if set).
func runCases(t *testing.T, inv, node string, tests []checkCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := healthy()
			tt.given(o)
			vs := Check(o)
			if got := has(vs, inv, node); got != tt.want {
				t.Fatalf("%s violation (node %q): got %v, want %v (all: %v)", inv, node, got, tt.want, vs)
			}
		})
	}
}

// A rollback that leaves out a node it touched is a violation even though
// the node ends on the config in force (a straggler after the rollout) and
// the rolled-back target is its last-good (issue 22, mutation 01).
func TestCheck_Revert_EveryTouchedNodeIsReverted(t *testing.T) {
	// skipNode02 removes every trace of node-02's revert from healthy().
	skipNode02 := func(o *Observation) {
		o.Events = slices.DeleteFunc(o.Events, func(e *sluicev1.Event) bool { return e.GetNode() == "node-02" })
		rollout(o, "r2").Counts.Reverted = 1
	}
	runCases(t, "Revert", "node-02", []checkCase{
		{name: "both touched nodes reverted", given: func(*Observation) {}},
		{name: "node-02's revert left out", given: skipNode02, want: true},
		{name: "node-02's revert shown only by its applier", given: func(o *Observation) {
			skipNode02(o)
			o.Nodes[1].Applies = append(o.Nodes[1].Applies, Apply{At: at(7.4), Fingerprint: "fp-a2", Rollout: "r2", Revert: true})
		}},
		{name: "node-02 listed revert-failed", given: func(o *Observation) {
			skipNode02(o)
			r := rollout(o, "r2")
			r.Failures = append(r.Failures, &sluicev1.NodeOutcome{Node: "node-02", Result: sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED,
				FailedCheck: "revert", Message: "its revert target is recorded invalid"})
		}},
		{name: "node-02 left: the schedule made it leave", given: func(o *Observation) {
			skipNode02(o)
			x := o.Expect["r2"]
			x.Leavers = []string{"node-02"}
			o.Expect["r2"] = x
		}},
		{name: "node-02 left and came back while the rollout reverted, not reverted", given: func(o *Observation) {
			skipNode02(o)
			x := o.Expect["r2"]
			x.Leavers, x.NodesMayLapse = []string{"node-02"}, true
			o.Expect["r2"] = x
			o.Events = append(o.Events, &sluicev1.Event{Type: "NodeJoinedRevert", Rollout: "r2", Node: "node-02"})
		}, want: true},
		{name: "node-02's revert deferred (it left), then it came back while the rollout reverted and was not reverted", given: func(o *Observation) {
			skipNode02(o)
			x := o.Expect["r2"]
			x.Leavers = []string{"node-02"}
			o.Expect["r2"] = x
			o.Events = append(o.Events,
				&sluicev1.Event{Type: "NodeRevertDeferred", Rollout: "r2", Node: "node-02", Time: timestamppb.New(at(7.1))},
				&sluicev1.Event{Type: "NodeJoinedRevert", Rollout: "r2", Node: "node-02", Time: timestamppb.New(at(7.3))})
		}, want: true},
		{name: "node-02 came back while the rollout reverted; its applier ran the revert after", given: func(o *Observation) {
			skipNode02(o)
			x := o.Expect["r2"]
			x.Leavers = []string{"node-02"}
			o.Expect["r2"] = x
			o.Events = append(o.Events,
				&sluicev1.Event{Type: "NodeRevertDeferred", Rollout: "r2", Node: "node-02", Time: timestamppb.New(at(7.1))},
				&sluicev1.Event{Type: "NodeJoinedRevert", Rollout: "r2", Node: "node-02", Time: timestamppb.New(at(7.3))})
			o.Nodes[1].Applies = append(o.Nodes[1].Applies, Apply{At: at(7.6), Fingerprint: "fp-a2", Rollout: "r2", Revert: true})
		}},
		{name: "node-02 came back while the rollout reverted; its revert ran only before", given: func(o *Observation) {
			skipNode02(o)
			o.Nodes[1].Applies = append(o.Nodes[1].Applies, Apply{At: at(7.0), Fingerprint: "fp-a2", Rollout: "r2", Revert: true})
			o.Events = append(o.Events, &sluicev1.Event{Type: "NodeJoinedRevert", Rollout: "r2", Node: "node-02", Time: timestamppb.New(at(7.3))})
		}, want: true},
		{name: "a rollout that ended without reverting (superseded) reverts nothing", given: func(o *Observation) {
			skipNode02(o)
			r := rollout(o, "r2")
			r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED
			o.ConfigWrites = o.ConfigWrites[:len(o.ConfigWrites)-1] // node-01's revert
			o.Events = slices.DeleteFunc(o.Events, func(e *sluicev1.Event) bool { return e.GetType() == "NodeReverted" })
			o.Nodes[0].Applies = o.Nodes[0].Applies[:2]
			r.Counts.Reverted = 0
			o.Expect["r2"] = Expectation{}
		}},
	})
}

// A rollout with a bake time starts a stage only after the stage before it
// baked: a RolloutBaking event at least the bake time before it.
func TestCheck_Bake_NoStageStartsBeforeThePreviousBaked(t *testing.T) {
	withStages := func(bakingAt float64, lost bool) func(o *Observation) {
		return func(o *Observation) {
			r := rollout(o, "r1")
			r.Strategy.BakeTime = durationpb.New(time.Second)
			r.Stages = []*sluicev1.StageResult{{Wave: 1, StartedAt: timestamppb.New(at(0.5))}, {Wave: 2, StartedAt: timestamppb.New(at(1.8))}}
			if bakingAt > 0 {
				o.Events = append(o.Events, &sluicev1.Event{Type: "RolloutBaking", Rollout: "r1", Time: timestamppb.New(at(bakingAt))})
			}
			x := o.Expect["r1"]
			x.EventsMayBeLost = lost
			o.Expect["r1"] = x
		}
	}
	runCases(t, "Bake", "", []checkCase{
		{name: "baked a second before wave 2", given: withStages(0.7, false)},
		{name: "wave 2 started without baking", given: withStages(0, false), want: true},
		{name: "wave 2 started half a second into the bake", given: withStages(1.3, false), want: true},
		{name: "events may be lost: not judged", given: withStages(0, true)},
		// Seeds 81, 84, 148 under load: the event was stamped 180 ms after
		// the decider began the bake (its step's writes came first); the
		// record's bakeUntil carries the decider's time.
		{name: "the event late, the record's bakeUntil a second before wave 2", given: func(o *Observation) {
			withStages(1.3, false)(o)
			rec := proto.Clone(rollout(o, "r1")).(*sluicev1.Rollout)
			rec.BakeUntil = timestamppb.New(at(1.7))
			o.RolloutWrites = append(o.RolloutWrites, KVOp{Key: "r1", Revision: 9, At: at(0.75), Rollout: rec})
		}},
		{name: "the record's bakeUntil only half a second before wave 2", given: func(o *Observation) {
			withStages(0, false)(o)
			rec := proto.Clone(rollout(o, "r1")).(*sluicev1.Rollout)
			rec.BakeUntil = timestamppb.New(at(2.3))
			o.RolloutWrites = append(o.RolloutWrites, KVOp{Key: "r1", Revision: 9, At: at(1.3), Rollout: rec})
		}, want: true},
		// Seed 67: a term opened wave 1's stage in the record and was
		// deposed before its desired writes; the next term found no node
		// started and began wave 2 at once.
		{name: "wave 1 started no node: nothing to bake", given: func(o *Observation) {
			withStages(0, false)(o)
			o.ConfigWrites = slices.DeleteFunc(o.ConfigWrites, func(w KVOp) bool { return w.Desired.GetRollout() == "r1" })
		}},
		{name: "wave 1's record counts no node, but a desired write of it was stored", given: withStages(0, false), want: true},
		{name: "wave 1's record counts a node whose write was not seen", given: func(o *Observation) {
			withStages(0, false)(o)
			o.ConfigWrites = slices.DeleteFunc(o.ConfigWrites, func(w KVOp) bool { return w.Desired.GetRollout() == "r1" })
			rollout(o, "r1").Stages[0].Nodes = 1
		}, want: true},
	})
}

// A revision a rollout record names must be stored at rest.
func TestCheck_I5_ReferencedRevisionsAreKept(t *testing.T) {
	o := healthy()
	if vs := Check(o); has(vs, "I5", "") {
		t.Fatalf("every revision stored: want no I5 violation, got %v", vs)
	}
	o.Unstored = []RevisionRef{{Rollout: "r1", Revision: "rev-1"}}
	if vs := Check(o); !has(vs, "I5", "") {
		t.Fatalf("r1's revision deleted: want an I5 violation, got %v", vs)
	}
}

// A timed-out node's fingerprint is recorded with cause timed-out by the
// coordinator as it times the node out (mutation 02), not later from the
// agent's report.
func TestCheck_I4_TimedOutFingerprintRecordedAsItTimesOut(t *testing.T) {
	timedOut := func(cause string, recordedAt float64) func(o *Observation) {
		return func(o *Observation) {
			r := rollout(o, "r2")
			r.Failures[0].Result, r.Failures[0].FailedCheck = sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, "deadline"
			o.StatusWrites = o.StatusWrites[:1]
			o.Fingerprints["fp-b2"] = &sluicev1.InvalidFingerprint{Fingerprint: "fp-b2", Node: "node-02", Rollout: "r2", Check: "deadline",
				Output: "apply deadline passed", Cause: cause, Time: timestamppb.New(at(recordedAt))}
			o.Events = append(o.Events, &sluicev1.Event{Type: "NodeTimedOut", Rollout: "r2", Node: "node-02", Time: timestamppb.New(at(6.5))})
		}
	}
	runCases(t, "I4", "node-02", []checkCase{
		{name: "recorded timed-out as it timed out", given: timedOut("timed-out", 6.49)},
		{name: "recorded with another cause", given: timedOut("check-failed", 6.49), want: true},
		{name: "recorded only after, from the agent's report", given: timedOut("timed-out", 6.8), want: true},
		// Seed 178: the record was garbage-written and recorded again.
		{name: "recorded again after the harness spoiled it", given: func(o *Observation) {
			timedOut("timed-out", 6.8)(o)
			o.Spoiled = append(o.Spoiled, Spoil{Bucket: contract.BucketFingerprints, Key: "fp-b2", Revision: 5, At: at(6.7)})
		}},
	})
}

// A fingerprint recorded invalid is never written to a node afterwards,
// except by its own rollout while it runs, or forgiven (mutation 14).
func TestCheck_KnownBad_NeverWrittenAfterItWasRecorded(t *testing.T) {
	// healthy(): fp-b2 failed on node-02 in r2, recorded at 6; r2 ended at 8.
	writeB2 := func(node, rollout string, written float64) func(o *Observation) {
		return func(o *Observation) {
			o.Fingerprints["fp-b2"].Rollout, o.Fingerprints["fp-b2"].Time = "r2", timestamppb.New(at(6))
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: node + ".desired", Revision: 9, At: at(written),
				Desired: &sluicev1.DesiredConfig{Node: node, Rollout: rollout, Fingerprint: "fp-b2", LeaderEpoch: 9, WrittenAt: timestamppb.New(at(written))}})
		}
	}
	runCases(t, "KnownBad", "node-03", []checkCase{
		{name: "written by its own rollout while it ran", given: writeB2("node-03", "r2", 6.5)},
		{name: "written before it was recorded", given: writeB2("node-03", "r3", 5.5)},
		{name: "written as a straggler's config after its rollout ended", given: writeB2("node-03", "r2", 9), want: true},
		{name: "written by a later rollout", given: writeB2("node-03", "r3", 10), want: true},
		{name: "written after it was forgiven", given: func(o *Observation) {
			writeB2("node-03", "r3", 10)(o)
			o.Fingerprints["fp-b2"].Forgiven = &sluicev1.Forgiveness{By: "an operator", At: timestamppb.New(at(9))}
		}},
	})
}

func TestCheck_Paused_AppliesInTheWindowButNotARestoreAtStart(t *testing.T) {
	acked := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	until := acked.Add(500 * time.Millisecond)
	applies := map[string][]Apply{
		"node-01": {{At: acked.Add(-time.Millisecond), Fingerprint: "before-the-ack"}, {At: until, Fingerprint: "after-the-resume"}},
		"node-02": {{At: acked.Add(100 * time.Millisecond), Fingerprint: "restored-at-start", RestoreAtStart: true}},
		"node-04": {{At: acked, Fingerprint: "returned-as-it-acknowledged"}},
	}
	if v := appliedWhilePaused(applies, 1, acked, until); len(v) != 0 {
		t.Fatalf("calls outside the window and a restore at start flagged: %v", v)
	}
	applies["node-03"] = []Apply{{At: acked.Add(100 * time.Millisecond), Fingerprint: "applied-while-paused"}}
	v := appliedWhilePaused(applies, 1, acked, until)
	if len(v) != 1 || v[0].Node != "node-03" || v[0].Invariant != "Paused" {
		t.Fatalf("an apply inside the window: want one Paused violation on node-03, got %v", v)
	}
}

// A node that joins while a rollout reverts gets the config in force; the
// rolled-back target given to it is a violation even though the rollout's
// end heals it (issue 22, mutation 08).
func TestCheck_JoinedRevert_JoinerNeverGetsTheRolledBackTarget(t *testing.T) {
	joiner := func(fp string, written float64) func(o *Observation) {
		return func(o *Observation) {
			o.Targets["r1"]["node-03"], o.Targets["r2"]["node-03"] = "fp-a3", "fp-b3"
			o.Joiners = []Joiner{{Node: "node-03", Rollout: "r2", At: at(6.5)}}
			o.ConfigWrites = append(o.ConfigWrites, KVOp{Key: "node-03.desired", Revision: 9, At: at(written),
				Desired: &sluicev1.DesiredConfig{Node: "node-03", Rollout: "r1", Fingerprint: fp, LeaderEpoch: 9}})
		}
	}
	runCases(t, "JoinedRevert", "node-03", []checkCase{
		{name: "given the config in force", given: joiner("fp-a3", 6.6)},
		{name: "given the rolled-back target", given: joiner("fp-b3", 6.6), want: true},
		{name: "the target written before it came back is not its join", given: joiner("fp-b3", 6.4)},
		{name: "the target written after the rollout ended is not the revert's", given: joiner("fp-b3", 8.5)},
	})
}
