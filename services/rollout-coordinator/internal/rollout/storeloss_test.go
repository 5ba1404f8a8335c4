package rollout

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestDecide_StoreLost: no rollout starts while the store is lost (I10),
// and the held head starts once an operator confirms.
func TestDecide_StoreLost(t *testing.T) {
	const lost = "the store is empty but 2 nodes run configs of revision 110b0b1c2d3e"
	lostLoad := loaded(head(1, r1.Id, "5"), r1, "n1", "n2")
	lostLoad.StoreLost = lost
	runDecide(t, []decideCase{
		{
			name:  "a term that loads a head on a lost store holds it",
			event: lostLoad,
			want:  []string{"emit " + EventRolloutHeld}, wantCounts: "no rollout",
		},
		{
			name:  "a head that moves on a lost store is held",
			event: HeadMoved{Head: head(1, r1.Id, "5"), Rev: r1, StoreLost: lost},
			want:  []string{"emit " + EventRolloutHeld}, wantCounts: "no rollout",
		},
		{
			name:  "held once per generation, not on every re-read",
			given: []Event{lostLoad},
			event: HeadMoved{Head: head(1, r1.Id, "5"), Rev: r1, StoreLost: lost},
			want:  nil, wantCounts: "no rollout",
		},
		{
			name:  "the operator's confirmation starts the held head",
			given: []Event{lostLoad},
			event: StoreLossChanged{},
			want:  []string{"start " + id1, "write n1", "write n2", "emit RolloutStarted"},
		},
		{
			name:  "a confirmation that leaves the store lost starts nothing",
			given: []Event{lostLoad},
			event: StoreLossChanged{Lost: lost},
			want:  nil, wantCounts: "no rollout",
		},
	})
}

// TestDecide_AfterAConfirmedLoss_ARevertKeepsWhatNodesRan: after an
// operator confirmed a lost store, no node has a backup stored and no
// revision is in force, yet the nodes run what they ran before the loss
// (their presence says so). A revert of the first rollout then must not
// write them the empty config (I10; chaos seeds 6 and 13): their revert
// fails, saying why, and they stay on their agent's last-good. A node that
// ran nothing still goes back to the empty config.
func TestDecide_AfterAConfirmedLoss_ARevertKeepsWhatNodesRan(t *testing.T) {
	const oldFP, oldRev, oldRollout = "0ld0f1ngerpr1nt", "0ldrev", "3-0ldrev"
	ran := func(p *sluicev1.NodePresence) *sluicev1.NodePresence {
		p.InForceFingerprint, p.InForceRevision, p.InForceRollout = oldFP, oldRev, oldRollout
		return p
	}
	ps := presence("n1", "n2", "n3")
	ran(ps[0])
	ran(ps[1]) // n3 never ran anything
	load := Loaded{Head: head(1, r1.Id, "3"), HeadRev: r1, Presence: ps}
	// n1 proves the new config: its presence says it runs that now.
	n1Proved := presence("n1")[0]
	n1Proved.InForceFingerprint, n1Proved.InForceRevision, n1Proved.InForceRollout = fp1, r1.Id, id1
	runDecide(t, []decideCase{{
		name: "the revert writes only the node that ran nothing; the others keep their last-good",
		given: []Event{load,
			Status{S: status("n1", provisioned, fp1, id1)}, Presence{Node: "n1", P: n1Proved}},
		event: Status{S: status("n2", invalid, fp1, id1)},
		want: []string{"record n2", "write n3", "emit NodeRevertTarget",
			"emit NodeFailed", "emit FingerprintInvalid", "emit NodeRevertFailed", "emit NodeRevertFailed", "emit RolloutReverting"},
		check: func(t *testing.T, s *State) {
			for _, name := range []string{"n1", "n2"} {
				if d := s.nodes[name].desired; d.GetRevert() || d.GetFingerprint() == emptyFP {
					t.Errorf("%s ran %s before the rollout: its desired config must stay, not be the empty config; got %+v", name, oldFP, d)
				}
				o := revertOutcomeOf(s.rollout.GetFailures(), name)
				if o.GetResult() != sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED || !strings.Contains(o.GetMessage(), "store was lost") ||
					!strings.Contains(o.GetMessage(), render.Short(oldFP)) {
					t.Errorf("%s: the record must list its revert failed, naming what it ran and the lost store; got %v", name, o)
				}
			}
			if d := s.nodes["n3"].desired; !d.GetRevert() || d.GetFingerprint() != emptyFP {
				t.Errorf("n3 ran nothing before: its revert is the empty config; got %+v", d)
			}
		},
	}})
}
