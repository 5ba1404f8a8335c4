package configurator

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// delete marks an intent for deletion and moves the head to a revision without it.
func (s *Service) delete(ctx context.Context, req *sluicev1.DeleteRequest) (*sluicev1.DeleteResponse, error) {
	kind, err := intent.ParseKind(req.GetKind())
	if err != nil {
		return nil, &apiError{code: contract.ErrCodeInvalid, desc: err.Error()}
	}
	if err := contract.ValidName(req.GetName()); err != nil {
		return nil, &apiError{code: contract.ErrCodeInvalid, desc: "name: " + err.Error()}
	}
	if errs := intent.ValidateStrategy(req.GetStrategy()); len(errs) > 0 {
		return nil, invalid("the request", errs)
	}
	id, key := intent.IDOf(kind, req.GetName()), intent.KeyOf(kind, req.GetName())

	unlock, err := s.beginChange(ctx, "the delete")
	if err != nil {
		return nil, err
	}
	defer unlock()
	cur, err := s.st.intents.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, &apiError{code: contract.ErrCodeNotFound, desc: fmt.Sprintf("%s does not exist", id)}
	case errors.Is(err, store.ErrUndecodable):
		// It is in no revision already; deleting it removes the bad value.
		if err := s.st.intents.Delete(ctx, key, cur.Revision); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return nil, &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf("%s changed during the delete; retry", id)}
			}
			return nil, unavailable(err)
		}
		s.events.Emit(&sluicev1.Event{Kind: events.KindIntent, Id: key, Type: "UnreadableIntentDeleted",
			Reason: fmt.Sprintf("%s/%s did not decode and was deleted on request", s.st.intents.Bucket(), key)})
	case err != nil:
		return nil, unavailable(err)
	case !cur.Value.GetMarkedForDeletion():
		in, err := s.readStored(ctx)
		if err != nil {
			return nil, unavailable(err)
		}
		if err := s.refuseOwned(ctx, "delete", []string{key}, in.live); err != nil {
			return nil, err
		}
		journal := &sluicev1.ApplyJournal{Strategy: req.GetStrategy(), Source: contract.SourceAPI, HasPrior: true, Mark: []string{key},
			Prior: []*sluicev1.PriorIntent{{Key: key, Value: cur.Value, KvRevision: cur.Revision}}}
		// Removing an intent cannot break a rule, unless the stored set was
		// already broken by hand; then say so rather than cut a bad revision.
		eff := change.Effective(in.landed(journal).live)
		if errs := intent.Validate(eff); len(errs) > 0 {
			return nil, invalid("the intents left after the delete", errs)
		}
		findings, err := s.verifyFleet(ctx, "the set the delete leaves", eff, req.GetStrategy(), false)
		if err != nil {
			return nil, err
		}
		if err := s.refuseKnownBad(ctx, &sluicev1.Revision{Id: render.RevisionID(eff), Intents: eff}, req.GetStrategy()); err != nil {
			return nil, err
		}
		var tooLarge *tooLargeError
		if err := s.fits("the revision ("+contract.Plural(len(eff), "intent")+")", &sluicev1.Revision{Id: render.RevisionID(eff), Intents: eff, CreatedAt: nowProto(s.cfg.Now)}); errors.As(err, &tooLarge) {
			return nil, &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf("refused: %v; nothing was stored. Delete more intents first, or raise max_payload on the NATS server", err)}
		} else if err != nil {
			return nil, unavailable(err)
		}
		// Through the apply journal, as every change of the stored set: the
		// mark and the head move land together or not at all.
		before := in.head
		done, err := s.commit(ctx, journal, func(_, _ []string) string { return "deleted " + id }, &in)
		if err != nil {
			return nil, err
		}
		resp := &sluicev1.DeleteResponse{Revision: done.head.GetRevision(), Generation: done.head.GetGeneration(),
			Changed: done.head.GetRevision() != before.Value.GetRevision(), Findings: findings}
		if resp.Changed {
			resp.WaitsFor = s.runningRollout(ctx, done.head)
		}
		return resp, nil
	}
	// Marked already, or an unreadable value just removed: the head follows.
	in, err := s.readStored(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	before := in.head
	next, err := s.advance(ctx, req.GetStrategy(), false, "", nil, func(diff) string { return "deleted " + id }, &in)
	if err != nil {
		return nil, interrupted(err)
	}
	resp := &sluicev1.DeleteResponse{
		Revision: next.GetRevision(), Generation: next.GetGeneration(),
		Changed: next.GetRevision() != before.Value.GetRevision(),
	}
	if resp.Changed {
		resp.WaitsFor = s.runningRollout(ctx, next)
	}
	return resp, nil
}
