package reaper

import (
	"context"

	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/storeloss"
)

// holdForLoss reports whether a pass must delete nothing because the store
// is lost (pkg/storeloss) or cannot be told: the keys a lost
// store still holds, or that agents write again, are all that is left of
// the fleet's state, and "nothing references it" means nothing in a store
// that forgot everything. The hold is logged once, and its end. r.mu must
// be held.
//
// Cost: one Get in a store that records a finished rollout.
func (r *Reaper) holdForLoss(ctx context.Context, h *handles) (bool, error) {
	loss, _, err := storeloss.Read(ctx, h.set)
	if err != nil {
		return true, err // the pass's caller logs it; nothing is deleted
	}
	if loss == nil {
		if r.lost != "" {
			r.log.Info().Msg("the store is no longer taken as lost; the reaper deletes again what nothing references")
			r.lost = ""
		}
		return false, nil
	}
	if r.lost == "" {
		r.lost = loss.String()
		r.log.Warn().Str(logging.FieldReason, r.lost).Msg("the reaper deletes nothing while the store is lost: " + storeloss.WayOut)
	}
	return true, nil
}
