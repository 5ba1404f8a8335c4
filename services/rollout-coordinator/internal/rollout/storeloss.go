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
	s.storeLost = lost
	if lost == "" && s.head != nil {
		s.headMoved(s.head, s.headRev, now)
	}
}
