package configurator

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// retry rolls the head out again after its rollout rolled back, was aborted
// or partially failed: a new generation of the same revision, with
// retryInvalid, so that the fingerprints it recorded are forgiven on purpose.
func (s *Service) retry(ctx context.Context, req *sluicev1.RetryRequest) (*sluicev1.RetryResponse, error) {
	if err := s.mu.Lock(ctx); err != nil {
		return nil, unavailable(err)
	}
	defer s.mu.Unlock()
	head, replayed, err := s.headFor(ctx, "retry", req.GetStrategy(), req.GetRequestId())
	if err != nil {
		return nil, err
	}
	if replayed {
		return &sluicev1.RetryResponse{Revision: head.Value.GetRevision(), Generation: head.Value.GetGeneration(), Replayed: true}, nil
	}
	id := contract.RolloutID(head.Value.GetGeneration(), head.Value.GetRevision())
	r, err := s.st.rollouts.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrUndecodable):
		// Taken for aborted, as the coordinator takes it: it may be retried.
		s.quarantine.Report(s.st.rollouts.Bucket(), id, r.Revision, err,
			"taken for an ended rollout, as the coordinator takes it: it may be retried")
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return nil, unavailable(fmt.Errorf("read rollout %s: %w", id, err))
	}
	plan, err := change.Retry(id, r.Value, !errors.Is(err, store.ErrNotFound), req.GetStrategy(), head.Value.GetStrategy())
	if err != nil {
		return nil, &apiError{code: contract.ErrCodeConflict, desc: err.Error()}
	}
	next, err := s.advance(ctx, plan.Strategy, true, req.GetRequestId(), nil, func(diff) string { return plan.Reason }, nil)
	if err != nil {
		return nil, interrupted(err)
	}
	return &sluicev1.RetryResponse{Revision: next.GetRevision(), Generation: next.GetGeneration(), Retries: id,
		WaitsFor: s.runningRollout(ctx, next)}, nil
}
