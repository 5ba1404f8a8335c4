package rollout

import "testing"

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
