package rollout

import (
	"fmt"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// A node's backup is what it last ran Provisioned: these rows were found by
// the chaos suite as nodes left running a config that was neither their
// desired nor their backup config (seed 342), and as a node reverted past
// its last-good because that config had failed on another node (seed 340).

// writes returns the WriteDesired actions in acts.
func writes(acts []Action) []WriteDesired {
	var out []WriteDesired
	for _, a := range acts {
		if w, ok := a.(WriteDesired); ok {
			out = append(out, w)
		}
	}
	return out
}

func TestDecide_SupersededWhileInFlight_KeepsTheProvenBackup(t *testing.T) {
	r0, r1, r2 := testRev("0000aaaa"), testRev("aaaa1111"), testRev("bbbb2222")
	fp0, fp1, fp2 := targetOf(r0), targetOf(r1), targetOf(r2)
	id0 := rolloutID(head(1, r0.Id, ""))
	id1, id2 := rolloutID(head(2, r1.Id, "")), rolloutID(head(3, r2.Id, ""))
	s := NewState()
	acts := Decide(s, Loaded{Head: withStrategy(head(2, r1.Id, "1"), &sluicev1.Strategy{MaxParallel: "1", FailureBudget: "1",
		PickupDeadline: durationOf(time.Second), ApplyDeadline: durationOf(time.Second)}), HeadRev: r1,
		LastApplied: &sluicev1.RolloutRef{Rollout: id0, Revision: r0.Id, Generation: 1}, LastAppliedRev: r0,
		Presence: presence("n1"),
		Desired:  []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp0, Rollout: id0, Revision: r0.Id, Config: render0(r0)}},
		Status:   []*sluicev1.NodeStatus{status("n1", provisioned, fp0, id0)},
	}, t0)
	ws := writes(acts)
	if len(ws) != 1 || ws[0].Backup.GetFingerprint() != fp0 || !ws[0].Backup.GetProven() {
		t.Fatalf("first rollout's write = %+v; want n1's proven config %s saved as its backup", ws, fp0)
	}

	// Superseded, and n1 never reported on fp1 (it timed out, within the
	// budget): fp1 is not proven on n1, so the backup key keeps fp0 and a
	// revert of the new rollout goes back to it.
	Decide(s, Written{Node: "n1", Fingerprint: fp1}, t0)
	Decide(s, HeadMoved{Head: withStrategy(head(3, r2.Id, "1"), &sluicev1.Strategy{MaxParallel: "1", WhileActive: "supersede"}), Rev: r2},
		t0.Add(100*time.Millisecond))
	acts = Decide(s, Tick{}, t0.Add(2*time.Second))
	ws = writes(acts)
	if len(ws) != 2 || !ws[0].Desired.GetCancel() || ws[0].Desired.GetFingerprint() != fp1 || ws[0].Backup != nil ||
		ws[1].Desired.GetFingerprint() != fp2 || ws[1].Backup != nil {
		t.Fatalf("writes = %+v; want n1's timed-out %s cancelled, then %s written with the backup key left on %s", ws, fp1, fp2, fp0)
	}
	// n1 had failed fp1 (its agent restored fp0), then fails fp2 too.
	Decide(s, Status{S: status("n1", invalid, fp1, id1)}, t0.Add(2200*time.Millisecond))
	acts = Decide(s, Status{S: status("n1", invalid, fp2, id2)}, t0.Add(2300*time.Millisecond))
	ws = writes(acts)
	if len(ws) != 1 || !ws[0].Desired.GetRevert() || ws[0].Desired.GetFingerprint() != fp0 {
		t.Fatalf("revert writes = %+v; want n1 written back to %s, the config it last ran Provisioned", ws, fp0)
	}
}

func TestDecide_ProvenBackupThatFailedElsewhere_IsStillTheRevertTarget(t *testing.T) {
	r1, r2 := testRev("aaaa1111"), testRev("bbbb2222")
	fp1, fp2 := targetOf(r1), targetOf(r2)
	id1, id2 := rolloutID(head(2, r1.Id, "")), rolloutID(head(3, r2.Id, ""))
	s := NewState()
	// r1 partially failed: it failed on n9, and n1 runs it Provisioned.
	acts := Decide(s, Loaded{Head: head(3, r2.Id, "1"), HeadRev: r2,
		LastApplied: &sluicev1.RolloutRef{Rollout: id1, Revision: r1.Id, Generation: 2}, LastAppliedRev: r1,
		Invalid:  []*sluicev1.InvalidFingerprint{{Fingerprint: fp1, Node: "n9", Rollout: id1}},
		Presence: presence("n1"),
		Desired:  []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1, Revision: r1.Id, Config: render0(r1)}},
		Status:   []*sluicev1.NodeStatus{status("n1", provisioned, fp1, id1)},
	}, t0)
	ws := writes(acts)
	if len(ws) != 1 || ws[0].Backup.GetFingerprint() != fp1 || !ws[0].Backup.GetProven() {
		t.Fatalf("write = %+v; want n1's proven config %s saved as its backup although it failed on n9", ws, fp1)
	}
	acts = Decide(s, Status{S: status("n1", invalid, fp2, id2)}, t0.Add(100*time.Millisecond))
	ws = writes(acts)
	if len(ws) != 1 || !ws[0].Desired.GetRevert() || ws[0].Desired.GetFingerprint() != fp1 {
		t.Fatalf("revert writes = %+v (actions %v); want n1 written back to %s, its last-good", ws, summarize(acts), fp1)
	}
	if c := s.rollout.GetCounts(); c.GetRevertFailed() != 0 {
		t.Fatalf("counts %v; want no failed revert", c)
	}
}

// A node in flight when the rollout stopped failed after all, but its
// Invalid status was overwritten before the coordinator saw it (the agent
// could not tell its write had landed); the status that follows carries the
// report, and the failure is counted (I3; chaos seed 27).
func TestDecide_StoppedNodeFailureCarriedByALaterStatusIsCounted(t *testing.T) {
	r1 := testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(2, r1.Id, ""))
	s := NewState()
	Decide(s, Loaded{Head: head(2, r1.Id, "2"), HeadRev: r1, Presence: presence("n1", "n2")}, t0)
	Decide(s, Status{S: status("n1", invalid, fp1, id1)}, t0.Add(time.Second)) // over budget: n2, in flight, stops
	carried := status("n2", provisioned, emptyFP, id1)                         // its revert, reported
	carried.LastInvalid = &sluicev1.InvalidReport{Fingerprint: fp1, Rollout: id1, Check: "connectivity", Output: "100% loss"}
	Decide(s, Status{S: carried}, t0.Add(2*time.Second))
	if c := s.rollout.GetCounts(); c.GetFailed() != 2 {
		t.Fatalf("counts %v; want n2's carried failure counted", c)
	}
	if f := outcomeOf(s.rollout.GetFailures(), "n2"); f.GetResult() != sluicev1.NodeResult_NODE_RESULT_INVALID || f.GetFailedCheck() != "connectivity" {
		t.Fatalf("n2's outcome = %v; want Invalid (connectivity)", f)
	}
}

// A node in flight wrote its Invalid report and stopped; its lease lapsed
// before the coordinator read the report, so it was skipped. The report,
// read then, is what happened to it: it moves from skipped to failed and
// counts against the budget (I3; chaos seed 136, where the rollout was
// already reverting and the record ended listing it skipped).
func TestDecide_SkippedNodesLateInvalidReport_CountsAsItsFailure(t *testing.T) {
	r1 := testRev("aaaa1111")
	fp1 := targetOf(r1)
	id1 := rolloutID(head(2, r1.Id, ""))
	for _, reverting := range []bool{false, true} {
		t.Run(fmt.Sprintf("reverting=%v", reverting), func(t *testing.T) {
			s := NewState()
			Decide(s, Loaded{Head: head(2, r1.Id, "2"), HeadRev: r1, Presence: presence("n1", "n2")}, t0) // both in flight
			Decide(s, Presence{Node: "n2"}, t0.Add(time.Second))                                          // n2 skipped
			if reverting {
				// n1 fails: over the budget of 0, the rollout reverts.
				Decide(s, Status{S: status("n1", invalid, fp1, id1)}, t0.Add(2*time.Second))
			}
			acts := Decide(s, Status{S: status("n2", invalid, fp1, id1)}, t0.Add(3*time.Second))
			c := s.rollout.GetCounts()
			f := outcomeOf(s.rollout.GetFailures(), "n2")
			if f.GetResult() != sluicev1.NodeResult_NODE_RESULT_INVALID || outcomeOf(s.rollout.GetSkipped(), "n2") != nil || c.GetSkipped() != 0 {
				t.Fatalf("n2: failure %v, skipped %v, counts %v; want it failed, no longer skipped", f, s.rollout.GetSkipped(), c)
			}
			wantFailed := uint32(1)
			if reverting {
				wantFailed = 2
			}
			if c.GetFailed() != wantFailed || c.GetTotal() != 2 {
				t.Fatalf("counts %v; want failed %d of 2", c, wantFailed)
			}
			if !reverting && s.rollout.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
				t.Fatalf("phase %v (actions %v); want the failure over budget 0 to stop and revert the rollout", s.rollout.GetPhase(), summarize(acts))
			}
		})
	}
}

// A node's status key that holds garbage is quarantined at intake, so a new
// term loads no status for it until its agent writes one again. The node
// reported Provisioned on the config in force before the garbage; a rollout
// that starts it and is then rolled back must put it back on that config,
// not on the older backup the key still held (chaos seed 100, I1: node-04
// was reverted to rollout 1's config while rollout 2's was in force). Where
// the records do say the desired config is not the node's last-good — it is
// known bad, or not the config in force — the backup stays the revert target.
func TestDecide_UnreadableStatus_RevertTargetIsWhatTheRecordsSay(t *testing.T) {
	r0, r1, r2 := testRev("0000aaaa"), testRev("aaaa1111"), testRev("bbbb2222")
	fp0, fp1, fp2 := targetOf(r0), targetOf(r1), targetOf(r2)
	id0, id1, id2 := rolloutID(head(1, r0.Id, "")), rolloutID(head(2, r1.Id, "")), rolloutID(head(3, r2.Id, ""))
	onR1 := &sluicev1.DesiredConfig{Node: "n1", Fingerprint: fp1, Rollout: id1, Revision: r1.Id, Config: render0(r1)}
	backupR0 := &sluicev1.DesiredConfig{Node: "n1", Fingerprint: fp0, Rollout: id0, Revision: r0.Id, Config: render0(r0), Proven: true}
	ref := func(id string, rev *sluicev1.Revision, gen uint64) *sluicev1.RolloutRef {
		return &sluicev1.RolloutRef{Rollout: id, Revision: rev.Id, Generation: gen}
	}
	tests := []struct {
		name       string
		given      Loaded // n1's status is not among the loaded ones: its key is unreadable
		wantBackup string // the backup key once n1 is started
		wantRevert string // what n1 is reverted to
	}{
		{
			name: "its desired config is the one in force: that is its revert target and its backup",
			given: Loaded{LastApplied: ref(id1, r1, 2), LastAppliedRev: r1,
				Desired: []*sluicev1.DesiredConfig{onR1}, Backups: []*sluicev1.DesiredConfig{backupR0}},
			wantBackup: fp1, wantRevert: fp1,
		},
		{
			// Seed 100 had garbage over that revision too: the term cannot read it.
			name: "its desired config is of the revision in force, whose content cannot be read: the same",
			given: Loaded{LastApplied: ref(id1, r1, 2),
				Desired: []*sluicev1.DesiredConfig{onR1}, Backups: []*sluicev1.DesiredConfig{backupR0}},
			wantBackup: fp1, wantRevert: fp1,
		},
		{
			name: "its desired config is recorded invalid: the backup stays",
			given: Loaded{LastApplied: ref(id1, r1, 2), LastAppliedRev: r1,
				Invalid: []*sluicev1.InvalidFingerprint{{Fingerprint: fp1, Node: "n1", Rollout: id1}},
				Desired: []*sluicev1.DesiredConfig{onR1}, Backups: []*sluicev1.DesiredConfig{backupR0}},
			wantBackup: fp0, wantRevert: fp0,
		},
		{
			name: "its desired config is not the one in force: the backup stays",
			given: Loaded{LastApplied: ref(id0, r0, 1), LastAppliedRev: r0,
				Desired: []*sluicev1.DesiredConfig{onR1}, Backups: []*sluicev1.DesiredConfig{backupR0}},
			wantBackup: fp0, wantRevert: fp0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			ev := tc.given
			ev.Head, ev.HeadRev, ev.Presence = head(3, r2.Id, "1"), r2, presence("n1")
			ws := writes(Decide(s, ev, t0))
			if len(ws) != 1 || ws[0].Desired.GetFingerprint() != fp2 {
				t.Fatalf("writes = %+v; want n1 started on %s", ws, fp2)
			}
			if got := s.nodes["n1"].backup.GetFingerprint(); got != tc.wantBackup {
				t.Errorf("backup = %s; want %s", got, tc.wantBackup)
			}
			acts := Decide(s, Status{S: status("n1", invalid, fp2, id2)}, t0.Add(time.Second))
			ws = writes(acts)
			if len(ws) != 1 || !ws[0].Desired.GetRevert() || ws[0].Desired.GetFingerprint() != tc.wantRevert {
				t.Fatalf("revert writes = %+v (actions %v); want n1 written back to %s", ws, summarize(acts), tc.wantRevert)
			}
		})
	}
}
