package configurator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// apply stores a batch of intents, all or nothing, and moves the head when
// the effective set changed.
func (s *Service) apply(ctx context.Context, req *sluicev1.ApplyRequest) (*sluicev1.ApplyResponse, error) {
	if len(req.GetIntents()) == 0 {
		return nil, &apiError{code: contract.ErrCodeInvalid, desc: "the request holds no intents"}
	}
	// The batch on its own first: its problems do not depend on what is stored.
	errs := append(intent.ValidateStrategy(req.GetStrategy()), intent.Validate(req.GetIntents())...)
	if len(errs) > 0 {
		return nil, invalid("the batch", errs)
	}
	req = proto.Clone(req).(*sluicev1.ApplyRequest)
	if req.Source == "" {
		req.Source = s.cfg.Source
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rollForward(ctx); err != nil {
		return nil, unavailable(err)
	}
	live, err := s.liveIntents(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	head, err := s.readHead(ctx)
	if err != nil {
		return nil, unavailable(err)
	}

	// The batch upserted into what is live; re-applying a marked intent un-marks it.
	merged := map[string]*sluicev1.Intent{}
	for k, e := range live {
		if !e.Value.GetMarkedForDeletion() {
			merged[k] = e.Value.GetIntent()
		}
	}
	resp := &sluicev1.ApplyResponse{}
	pending := 0
	for _, in := range render.Sorted(req.GetIntents()) {
		key := intent.Key(in)
		merged[key] = in
		cur, ok := live[key]
		switch {
		case !ok || cur.Value.GetMarkedForDeletion():
			resp.Created = append(resp.Created, intent.ID(in))
			pending++
		case !proto.Equal(cur.Value.GetIntent(), in):
			resp.Updated = append(resp.Updated, intent.ID(in))
			pending++
		default:
			resp.Unchanged = append(resp.Unchanged, intent.ID(in))
		}
	}
	set := make([]*sluicev1.Intent, 0, len(merged))
	for _, in := range merged {
		set = append(set, in)
	}
	if errs := intent.Validate(set); len(errs) > 0 {
		return nil, invalid("the batch together with the stored intents", errs)
	}
	target := render.RevisionID(set)
	reroll := ""
	if pending == 0 && head.Value.GetRevision() == target {
		if reroll, err = s.rerollReason(ctx, head.Value, req.GetStrategy()); err != nil {
			return nil, unavailable(err)
		}
		if reroll == "" {
			resp.Revision, resp.Generation = target, head.Value.GetGeneration()
			return resp, nil
		}
	}

	var jrev uint64
	if pending > 0 {
		// From here the apply is committed: if anything below fails, the
		// journal makes the next apply or the next start complete it.
		jrev, err = s.st.journal.Create(ctx, contract.KeyPending, req)
		if errors.Is(err, store.ErrConflict) {
			return nil, &apiError{code: contract.ErrCodeConflict, desc: "another configurator is applying right now; retry"}
		}
		if err != nil {
			return nil, unavailable(err)
		}
		created, updated, err := s.writeIntents(ctx, req, target)
		if err != nil {
			return nil, interrupted(err)
		}
		resp.Created, resp.Updated = created, updated
	}
	next, err := s.advance(ctx, req.GetStrategy(), reroll != "", func(diff) string {
		if reroll != "" {
			return reroll
		}
		return applyReason(len(req.GetIntents()), resp.Created, resp.Updated)
	})
	if err != nil {
		return nil, interrupted(err)
	}
	if jrev != 0 {
		if err := s.st.journal.Delete(ctx, contract.KeyPending, jrev); err != nil {
			// Completing it again later writes nothing and moves nothing.
			s.log.Warn().Err(err).Msg("remove apply journal")
		}
	}
	resp.Revision, resp.Generation = next.GetRevision(), next.GetGeneration()
	resp.Changed = next.GetGeneration() != head.Value.GetGeneration()
	return resp, nil
}

// rerollReason says why applying the head's own content again should start
// a new rollout of it, or "" when it should change nothing: the head's
// rollout ended without putting it in force (RolledBack, Aborted), or the
// operator asks to retry invalid fingerprints on purpose.
func (s *Service) rerollReason(ctx context.Context, head *sluicev1.Head, st *sluicev1.Strategy) (string, error) {
	if head == nil {
		return "", nil
	}
	id := contract.RolloutID(head.GetGeneration(), head.GetRevision())
	r, err := s.st.rollouts.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil // not started yet: it is on its way
	}
	if err != nil {
		return "", err
	}
	switch phase := r.Value.GetPhase(); {
	case phase == sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK || phase == sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED:
		return fmt.Sprintf("re-applied revision %s: its rollout %s ended %s (%s)", render.Short(head.GetRevision()), id,
			strings.TrimPrefix(phase.String(), "ROLLOUT_PHASE_"), r.Value.GetReason()), nil
	case st.GetRetryInvalid() && phase != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING && phase != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING:
		return fmt.Sprintf("re-applied revision %s to retry invalid fingerprints on purpose", render.Short(head.GetRevision())), nil
	}
	return "", nil
}

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

	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rollForward(ctx); err != nil {
		return nil, unavailable(err)
	}
	cur, err := s.st.intents.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &apiError{code: contract.ErrCodeNotFound, desc: fmt.Sprintf("%s does not exist", id)}
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if !cur.Value.GetMarkedForDeletion() {
		// Removing an intent cannot break a rule, unless the stored set was
		// already broken by hand; then say so rather than cut a bad revision.
		live, err := s.liveIntents(ctx)
		if err != nil {
			return nil, unavailable(err)
		}
		delete(live, key)
		if errs := intent.Validate(effective(live)); len(errs) > 0 {
			return nil, invalid("the intents left after the delete", errs)
		}
		marked := proto.Clone(cur.Value).(*sluicev1.StoredIntent)
		marked.MarkedForDeletion = true
		marked.UpdatedAt = nowProto(s.cfg.Now)
		if _, err := s.st.intents.Update(ctx, key, marked, cur.Revision); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return nil, &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf("%s changed during the delete; retry", id)}
			}
			return nil, unavailable(err)
		}
		s.events.Emit(&sluicev1.Event{Kind: events.KindIntent, Id: key, Type: "IntentMarkedForDeletion",
			Reason: fmt.Sprintf("%s deleted; the next revision leaves it out and the reaper removes it once nothing references it", id)})
	}
	before, err := s.readHead(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	next, err := s.advance(ctx, req.GetStrategy(), false, func(diff) string { return "deleted " + id })
	if err != nil {
		return nil, interrupted(err)
	}
	return &sluicev1.DeleteResponse{
		Revision: next.GetRevision(), Generation: next.GetGeneration(),
		Changed: next.GetRevision() != before.Value.GetRevision(),
	}, nil
}
