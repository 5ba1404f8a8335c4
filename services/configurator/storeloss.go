package configurator

import (
	"context"
	"fmt"

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
	loss, _, err := storeloss.Read(ctx, s.st.set)
	if err != nil {
		return unavailable(fmt.Errorf("tell whether the store is lost: %w", err))
	}
	if loss == nil {
		if s.lost.CompareAndSwap(true, false) {
			s.log.Info().Str(logging.FieldReason, "the store records a rollout, or an operator confirmed starting from nothing").
				Msg("the store is no longer taken as lost; changes are accepted")
		}
		return nil
	}
	if !s.lost.Swap(true) {
		s.events.Emit(&sluicev1.Event{Kind: contract.KindStore, Id: contract.IDStore, Type: contract.EventStoreLost,
			Revision: loss.Revisions[0].Revision,
			Reason:   fmt.Sprintf("%s; the configurator cuts no revision until an operator recovers: %s", loss, storeloss.WayOut)})
	}
	return &apiError{code: contract.ErrCodeStoreLost, desc: storeloss.Refusal(loss, what).Error()}
}
