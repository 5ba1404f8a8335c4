package configurator

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// restoreHead is reconcile's answer to a head that does not decode when
// this process wrote none (repairHead rewrites the one it wrote): the
// newest rollout's record holds the revision, generation and strategy of
// the head it rolled out. When the stored intents are that revision, the
// head is written again as that record says (restored), so no coordinator
// starts the change again and the operator's strategy stays; the head's
// generation could only have moved past the record's by a retry that had
// not started, which is lost. Otherwise the head had moved on with a
// strategy recorded nowhere else: in is left to cut the next generation
// from the record's revision (lostStrategy says why the default strategy
// is used; the head records it: Head.strategy_lost). A failed read holds (err): what cannot be read is no evidence.
func (s *Service) restoreHead(ctx context.Context, in *inputs) (restored bool, lostStrategy string, err error) {
	rec, err := s.newestRollout(ctx)
	if err != nil || rec == nil {
		return false, "the head did not decode and no rollout record says what it held: the default strategy is used", err
	}
	eff, err := s.keepInForce(ctx, change.Effective(in.live), in.unreadable, &sluicev1.Head{Revision: rec.GetRevision()}, in.read)
	if err != nil || render.RevisionID(eff) != rec.GetRevision() {
		// advance says what keepInForce found; the diff is from the record's revision.
		in.head.Value.Revision = rec.GetRevision()
		return false, fmt.Sprintf("the head did not decode and had moved past rollout %s: its strategy is lost, the default is used", rec.GetId()), nil
	}
	next := &sluicev1.Head{
		Revision: rec.GetRevision(), Generation: rec.GetGeneration(), Strategy: rec.GetStrategy(),
		UpdatedAt: timestamppb.New(s.cfg.Now()), Source: rec.GetSource(),
		Reason: fmt.Sprintf("restored: the head did not decode; written again from rollout %s's record (its revision, generation, strategy and source)", rec.GetId()),
	}
	if _, err := s.st.head.Update(ctx, contract.KeyHead, next, in.head.Revision); err != nil {
		return false, "", fmt.Errorf("restore the unreadable head from rollout %s: %w", rec.GetId(), err)
	}
	s.lastHead.Store(next)
	s.quarantine.Rewritten(s.st.head.Bucket(), contract.KeyHead, in.head.Revision, in.headErr,
		fmt.Sprintf("the head of rollout %s's record (revision %s, generation %d, its strategy)", rec.GetId(), render.Short(rec.GetRevision()), rec.GetGeneration()))
	return true, "", nil
}

// newestRollout is the record of the rollout of the highest head
// generation (nil: none stored). An unreadable newest record is no answer
// either way: nil, as if none (its readers report it).
func (s *Service) newestRollout(ctx context.Context) (*sluicev1.Rollout, error) {
	keys, err := s.st.rollouts.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the rollout records: %w", err)
	}
	newest, at := "", uint64(0)
	for _, k := range keys {
		if gen, ok := contract.RolloutGeneration(k); ok && gen > at {
			newest, at = k, gen
		}
	}
	if newest == "" {
		return nil, nil
	}
	r, err := s.st.rollouts.Get(ctx, newest)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUndecodable):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read rollout %s: %w", newest, err)
	}
	return r.Value, nil
}
