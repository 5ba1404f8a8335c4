package configurator

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// refuseLost refuses what (an apply, a delete, a registry's sync, a
// reconcile) while the store is lost (pkg/storeloss): the configurator
// cuts no revision that would become the whole config of nodes whose
// config the store forgot. An answer it could not read refuses too: it is
// no proof the store is whole. The first refusal of a loss is logged and
// emitted (StoreLost) once, until the store is found whole again.
//
// Cost: one Get in a store that records a finished rollout.
func (s *Service) refuseLost(ctx context.Context, what string) error {
	loss, _, err := storeloss.ReadFrom(ctx, s.st.set, s.st.fleet.List)
	if err != nil {
		return unavailable(fmt.Errorf("tell whether the store is lost: %w", err))
	}
	s.noteLoss(loss)
	if loss == nil {
		return nil
	}
	return &apiError{code: contract.ErrCodeStoreLost, desc: storeloss.Refusal(loss, what).Error()}
}

// lossEvery is Config.LossCheck's default: within about two heartbeats of
// a wipe at the default node lease, the agents' presence has said what
// they run. One Get in a store that records a finished rollout.
const lossEvery = 30 * time.Second

// checkLost asks whether the store is lost and says so on a change; a
// read that fails is left to the next check (a change asked for meanwhile
// is refused on it).
func (s *Service) checkLost(ctx context.Context) {
	loss, _, err := storeloss.ReadFrom(ctx, s.st.set, s.st.fleet.List)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("tell whether the store is lost; asking again shortly")
		}
		return
	}
	s.noteLoss(loss)
}

// noteLoss logs and emits StoreLost once when the store becomes lost, and
// logs once when it no longer is.
func (s *Service) noteLoss(loss *storeloss.Loss) {
	if loss == nil {
		if s.lost.CompareAndSwap(true, false) {
			s.log.Info().Str(logging.FieldReason, "the store records a rollout, or an operator confirmed starting from nothing").
				Msg("the store is no longer taken as lost; changes are accepted")
		}
		return
	}
	if !s.lost.Swap(true) {
		s.events.Emit(&sluicev1.Event{Kind: contract.KindStore, Id: contract.IDStore, Type: contract.EventStoreLost,
			Revision: loss.Revisions[0].Revision,
			Reason:   fmt.Sprintf("%s; the configurator cuts no revision until an operator recovers: %s", loss, storeloss.WayOut)})
	}
}
