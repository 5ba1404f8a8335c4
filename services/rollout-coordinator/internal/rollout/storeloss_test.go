package rollout

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

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

// The same across a leader change: a new term resumes the first rollout
// after a confirmed loss, where n1 has proved the rollout's config (its
// agent now names only that) and n2 then fails. Nothing says what n1 ran
// before, but the store was confirmed lost: it is not reverted to the empty
// config. On a store never lost (a first install) it is, as a node that
// ran nothing before.
func TestDecide_AfterAConfirmedLoss_ANewTermsRevertKeepsWhatNodesRan(t *testing.T) {
	h := head(1, r1.Id, "2")
	var started *sluicev1.Rollout
	var desired []*sluicev1.DesiredConfig
	for _, a := range Decide(NewState(), Loaded{Head: h, HeadRev: r1, Presence: presence("n1", "n2")}, t0) {
		switch a := a.(type) {
		case StartRollout:
			started = a.Rollout
		case WriteDesired:
			desired = append(desired, a.Desired)
		}
	}
	if len(desired) != 2 || started == nil {
		t.Fatalf("start wrote %v, record %v; want both nodes written", desired, started)
	}
	for _, tc := range []struct {
		name      string
		confirmed bool
		wantEmpty bool
	}{
		{"after a confirmed loss n1 keeps the config it proved", true, false},
		{"on a first install n1 goes back to the empty config", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := presence("n1", "n2")
			ps[0].InForceFingerprint, ps[0].InForceRevision, ps[0].InForceRollout = fp1, r1.Id, id1
			s := NewState()
			Decide(s, Loaded{Head: h, HeadRev: r1, Active: proto.Clone(started).(*sluicev1.Rollout), ActiveRev: r1, Term: 2, Presence: ps, Desired: desired,
				Status: []*sluicev1.NodeStatus{status("n1", provisioned, fp1, id1)}, StoreConfirmed: tc.confirmed}, t0.Add(time.Second))
			Decide(s, Status{S: status("n2", invalid, fp1, id1)}, t0.Add(2*time.Second))
			d := s.nodes["n1"].desired
			if got := d.GetRevert() && d.GetFingerprint() == emptyFP; got != tc.wantEmpty {
				t.Fatalf("n1's desired config after the revert began: %+v; want the empty config written: %v", d, tc.wantEmpty)
			}
			if !tc.wantEmpty {
				o := revertOutcomeOf(s.rollout.GetFailures(), "n1")
				if o.GetResult() != sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED || !strings.Contains(o.GetMessage(), "confirmed empty") {
					t.Fatalf("n1: the record must list its revert failed, naming the lost store; got %v", o)
				}
			}
		})
	}
}
