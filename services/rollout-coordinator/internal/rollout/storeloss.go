package rollout

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// EventRolloutHeld: the head's rollout is not started because the store
// is lost (invariant I10); it starts once an operator confirms.
const EventRolloutHeld = "RolloutHeld"

// holdForLoss leaves head h unstarted while the store is lost: its
// revision may be a partial set cut after the loss, which would become
// the whole config of nodes whose config the store forgot. Reported once
// per generation; startedGen is left alone, so the confirmation starts it.
func (s *State) holdForLoss(h *sluicev1.Head) {
	if s.heldGen == h.GetGeneration() {
		return
	}
	s.heldGen = h.GetGeneration()
	id := contract.RolloutID(h.GetGeneration(), h.GetRevision())
	s.emit(&sluicev1.Event{Kind: contract.KindRollout, Id: id, Type: EventRolloutHeld, Rollout: id, Revision: h.GetRevision(),
		Reason: fmt.Sprintf("generation %d (revision %s) is not rolled out: %s; it starts once an operator runs 'sluice recover --confirm-empty'",
			h.GetGeneration(), render.Short(h.GetRevision()), s.storeLost)})
}

// storeLossChanged takes the rule's answer after an operator's
// confirmation: a head held for the loss starts now.
func (s *State) storeLossChanged(lost string, now time.Time) {
	s.storeLost, s.storeConfirmed = lost, true
	if lost == "" && s.head != nil {
		s.headMoved(s.head, s.headRev, now)
	}
}

// ran is a config a node's agent says it runs: its presence's in_force_*.
type ran struct{ fingerprint, revision, rollout string }

// ranBefore is what n ran before rollout touched it, for a node nothing
// stored has a desired config or backup for: what its agent says it runs,
// unless that is nothing or rollout's own config. It is asked when the
// rollout first writes n (its agent has not taken the new config yet), and
// when a new term resumes the rollout (resumed): a node that proved the
// rollout's config by then names only that (its agent keeps one
// last-good). After a confirmed store loss that is taken as having run
// something nobody knows (an empty ran): a node that ran nothing before
// keeps a config it proved, rather than any node losing what it ran; on a
// store never lost, as having run nothing.
//
// After a store loss no stored value holds what a node ran (pkg/storeloss),
// and a revert must not take "no backup" for "ran nothing": that wrote
// every node the empty config (chaos seeds 6 and 13, I10).
func (s *State) ranBefore(n *node, rollout string, resumed bool) *ran {
	switch r := n.inForce(); {
	case r.fingerprint == "":
		return nil
	case r.rollout != rollout:
		return &r
	case resumed && s.storeConfirmed:
		return &ran{}
	}
	return nil
}
