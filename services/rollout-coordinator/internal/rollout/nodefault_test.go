package rollout

import (
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// frrDown is the node_fault an agent reports when its FRR does not answer
// at validate, before anything on the node changed.
const frrDown = "frr applier: before applying anything: frr instance n1: show version: FRR is not running: no daemon answers"

// failedAs is st reporting Invalid as a node fault (fault != "") or as the
// config's failure.
func failedAs(st *sluicev1.NodeStatus, fault string) *sluicev1.NodeStatus {
	st.NodeFault = fault
	return st
}

// carrying is a status of node on fingerprint other that carries the Invalid
// report of fp under rollout, as a node fault when fault != "".
func carrying(node, other, fp, rollout, fault string) *sluicev1.NodeStatus {
	st := status(node, provisioned, other, rollout)
	st.LastInvalid = &sluicev1.InvalidReport{Fingerprint: fp, Rollout: rollout, Revision: r1.Id, Check: "validate",
		Output: "FRR is not running", NodeFault: fault}
	return st
}

// TestDecide_NodeFault: an Invalid report is a failure wherever the decider
// reads it, but only a config's own failure is recorded invalid (I9); a
// node fault (NodeStatus.node_fault, InvalidReport.node_fault) stops and
// reverts the rollout all the same, and says why its fingerprint is spared.
func TestDecide_NodeFault(t *testing.T) {
	progressing := &sluicev1.Rollout{Id: id1, Revision: r1.Id, Generation: 1, Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Strategy: &sluicev1.Strategy{MaxParallel: "2"}}
	adopted := func(st *sluicev1.NodeStatus) Event {
		return Loaded{Head: head(1, r1.Id, "2"), HeadRev: r1, Active: progressing, ActiveRev: r1, Presence: presence("n1", "n2", "n3"),
			Desired: []*sluicev1.DesiredConfig{{Node: "n1", Fingerprint: fp1, Rollout: id1}, {Node: "n2", Fingerprint: fp1, Rollout: id1}},
			Status:  []*sluicev1.NodeStatus{st}}
	}
	type row struct {
		name        string
		given       []Event
		event       Event
		fault       bool // the report is a node fault
		wantRecord  bool // the event records a fingerprint invalid
		wantKnown   bool // the fingerprint is in the invalid set after it
		wantStopped bool // the rollout stops and reverts (the failure counts)
	}
	var rows []row
	for _, fault := range []bool{true, false} {
		nf, who := "", "the config's failure"
		if fault {
			nf, who = frrDown, "a node fault"
		}
		rows = append(rows,
			row{name: "reported to the active rollout, " + who,
				given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3")},
				event: Status{S: failedAs(status("n1", invalid, fp1, id1), nf)},
				fault: fault, wantRecord: !fault, wantKnown: !fault, wantStopped: true},
			row{name: "found by a new term adopting the rollout, " + who,
				event: adopted(failedAs(status("n1", invalid, fp1, id1), nf)),
				fault: fault, wantRecord: !fault, wantKnown: !fault, wantStopped: true},
			row{name: "carried by a later status, " + who,
				given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3")},
				event: Status{S: carrying("n1", "other", fp1, id1, nf)},
				fault: fault, wantRecord: !fault, wantKnown: !fault},
			row{name: "late, for a rollout that is not the active one, " + who,
				given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3")},
				event: Status{S: failedAs(status("n3", invalid, fp2, id2), nf)},
				fault: fault, wantRecord: !fault, wantKnown: !fault},
			// n1's own failure recorded fp1 and stopped the rollout with n2
			// in flight: n2's report is listed, and records nothing more.
			row{name: "in flight when the rollout stopped, then failed, " + who,
				given: []Event{loaded(head(1, r1.Id, "2"), r1, "n1", "n2", "n3"), Status{S: status("n1", invalid, fp1, id1)}},
				event: Status{S: failedAs(status("n2", invalid, fp1, id1), nf)},
				fault: fault, wantKnown: true, wantStopped: true},
		)
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			for _, ev := range tc.given {
				Decide(s, ev, t0)
			}
			acts := Decide(s, tc.event, t0.Add(time.Second))
			recorded := false
			for _, a := range acts {
				if _, ok := a.(RecordInvalid); ok {
					recorded = true
				}
			}
			_, known := s.invalid[fp1]
			if _, ok := s.invalid[fp2]; ok {
				known = true
			}
			if recorded != tc.wantRecord || known != tc.wantKnown {
				t.Errorf("record action %v, in the invalid set %v; want %v, %v (actions %s)",
					recorded, known, tc.wantRecord, tc.wantKnown, strings.Join(summarize(acts), ", "))
			}
			if tc.wantStopped {
				if s.rollout.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING || s.rollout.GetCounts().GetFailed() == 0 {
					t.Errorf("rollout %s, counts %s; want reverting with the failure counted", s.rollout.GetPhase(), counts(s))
				}
			}
			if tc.fault && tc.wantStopped {
				want := "not recorded invalid: the node could not apply it (" + frrDown + ")"
				found := false
				for _, f := range s.rollout.GetFailures() {
					found = found || f.GetMessage() == want
				}
				if !found {
					t.Errorf("failures %v; want a node's outcome saying %q", s.rollout.GetFailures(), want)
				}
			}
		})
	}
}
