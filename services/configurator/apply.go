package configurator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// apply stores a batch of intents, all or nothing, and moves the head when
// the effective set changed. Every check comes before the first write:
// validation of the batch and of the set it produces, and that every value
// it writes (the journal, each intent, the revision) fits in one message.
// What can still fail after that is the control plane itself: the journal
// then completes or rolls the apply back (journal.go).
func (s *Service) apply(ctx context.Context, req *sluicev1.ApplyRequest) (*sluicev1.ApplyResponse, error) {
	if len(req.GetIntents()) == 0 {
		return nil, &apiError{code: contract.ErrCodeInvalid, desc: "the request holds no intents"}
	}
	// Before anything costs time: validation, and one write per intent.
	if err := intent.CheckApplySize(len(req.GetIntents())); err != nil {
		return nil, &apiError{code: contract.ErrCodeInvalid, desc: err.Error() + "; nothing was stored"}
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

	unlock, err := s.beginChange(ctx, "the apply")
	if err != nil {
		return nil, err
	}
	defer unlock()
	in, err := s.readStored(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	live, unreadable, head := in.live, in.unreadable, in.head

	if id := req.GetRequestId(); id != "" && head.Value.GetRequestId() == id && !req.GetDryRun() {
		// The same request again (its sender timed out waiting for the
		// first answer): answer what it did rather than applying it twice,
		// which after a rollback would start a re-roll nobody asked for.
		return &sluicev1.ApplyResponse{Revision: head.Value.GetRevision(), Generation: head.Value.GetGeneration(), Changed: true, Replayed: true}, nil
	}
	plan := change.Apply(live, unreadable, req.GetIntents())
	resp := &sluicev1.ApplyResponse{Created: plan.Created, Updated: plan.Updated, Unchanged: plan.Unchanged}
	writes, set := plan.Writes, plan.Set
	journal := &sluicev1.ApplyJournal{Intents: req.GetIntents(), Strategy: req.GetStrategy(), Source: req.GetSource(), HasPrior: true,
		RequestId: req.GetRequestId(), Prior: plan.Prior}
	// A stored intent that is unreadable, and that the batch does not
	// overwrite, keeps its version in force (keepInForce).
	keep := maps.Clone(unreadable)
	for _, in := range req.GetIntents() {
		delete(keep, intent.Key(in))
	}
	if set, err = s.keepInForce(ctx, set, keep, head.Value, in.read); err != nil {
		return nil, err
	}
	if errs := intent.ValidateChanging(set, req.GetIntents()); len(errs) > 0 {
		return nil, invalid("the batch together with the stored intents", errs)
	}
	if errs := change.MarkedDependencies(req.GetIntents(), set, live); len(errs) > 0 {
		return nil, invalid("the batch, which depends on intents marked for deletion,", errs)
	}
	if err := s.refuseOwned(ctx, "apply", keysOf(writes), live); err != nil {
		return nil, err
	}
	target := render.RevisionID(set)
	reroll := ""
	if len(writes) == 0 && head.Value.GetRevision() == target {
		if reroll, err = s.rerollReason(ctx, head.Value, req.GetStrategy()); err != nil {
			return nil, unavailable(err)
		}
		if reroll == "" {
			if err := s.refuseStrategyChange(ctx, head.Value, req.GetStrategy()); err != nil {
				return nil, err
			}
			resp.Revision, resp.Generation = target, head.Value.GetGeneration()
			resp.WaitsFor = s.queuedBehind(ctx, head.Value)
			return resp, nil // a dry run's answer too: nothing would change
		}
	}
	// The head moves: the whole set is verified on the fleet, and a
	// rollout the coordinator would refuse is refused now.
	if resp.Findings, err = s.verifyFleet(ctx, "the set the apply produces", set, req.GetStrategy(), req.GetStrict()); err != nil {
		return nil, err
	}
	if err := s.refuseKnownBad(ctx, &sluicev1.Revision{Id: target, Intents: set}, req.GetStrategy()); err != nil {
		return nil, err
	}
	if err := s.refuseIncompatible(ctx, &sluicev1.Revision{Id: target, Intents: set}, req.GetStrategy()); err != nil {
		return nil, err
	}
	if req.GetDryRun() && len(writes) == 0 {
		resp.Revision, resp.Changed = target, true
		return resp, nil
	}
	if len(writes) == 0 {
		// Only the head moves (a re-roll, or back to a set stored already).
		next, err := s.advance(ctx, req.GetStrategy(), reroll != "", req.GetRequestId(), nil, func(diff) string {
			if reroll != "" {
				return reroll
			}
			return applyReason(len(req.GetIntents()), nil, nil)
		}, &in) // nothing is written: the inputs stand
		if err != nil {
			return nil, interrupted(err)
		}
		resp.Revision, resp.Generation = next.GetRevision(), next.GetGeneration()
		resp.Changed = next.GetGeneration() != head.Value.GetGeneration()
		if resp.Changed {
			resp.WaitsFor = s.runningRollout(ctx, next)
		}
		return resp, nil
	}

	if err := s.checkFits(journal, writes, set, target); err != nil {
		return nil, err
	}
	if req.GetDryRun() {
		// Every check an apply makes has passed: it would be stored.
		resp.Revision, resp.Changed = target, target != head.Value.GetRevision() || reroll != ""
		return resp, nil
	}
	done, err := s.commit(ctx, journal, func(created, updated []string) string { return applyReason(len(req.GetIntents()), created, updated) }, &in)
	if err != nil {
		return nil, err
	}
	resp.Revision, resp.Generation = done.head.GetRevision(), done.head.GetGeneration()
	resp.Changed = done.head.GetGeneration() != head.Value.GetGeneration()
	if resp.Changed {
		resp.WaitsFor = s.runningRollout(ctx, done.head)
	}
	return resp, nil
}

// rerollReason says why applying the head's own content again should start
// a new rollout of it, or "" when it should change nothing: the head's
// rollout ended without putting it in force (RolledBack, Aborted, or a
// record that does not decode, which the coordinator takes for Aborted), or
// the operator asks to retry invalid fingerprints on purpose.
func (s *Service) rerollReason(ctx context.Context, head *sluicev1.Head, st *sluicev1.Strategy) (string, error) {
	if head == nil {
		return "", nil
	}
	id := contract.RolloutID(head.GetGeneration(), head.GetRevision())
	r, err := s.st.rollouts.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil // not started yet: it is on its way
	}
	if errors.Is(err, store.ErrUndecodable) {
		// The coordinator takes a record it cannot read for an aborted
		// rollout and never runs it again; so does this. Answering "retry"
		// would refuse every re-apply for as long as the record stays so.
		s.quarantine.Report(s.st.rollouts.Bucket(), id, r.Revision, err,
			"taken for an ended rollout, as the coordinator takes it: applying its intents again rolls them out again")
		return fmt.Sprintf("re-applied revision %s: the record of its rollout %s does not decode", render.Short(head.GetRevision()), id), nil
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

// refuseStrategyChange refuses applying the head's own content with another
// strategy while its rollout runs: a running rollout's strategy is never
// changed under it. A request without a strategy (no strategy flags) asks
// for no change.
func (s *Service) refuseStrategyChange(ctx context.Context, head *sluicev1.Head, st *sluicev1.Strategy) error {
	if head == nil || proto.Size(st) == 0 || proto.Equal(st, head.GetStrategy()) {
		return nil
	}
	id := contract.RolloutID(head.GetGeneration(), head.GetRevision())
	r, err := s.st.rollouts.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // not started: nothing runs yet
	case err != nil:
		return unavailable(err)
	}
	if !contract.Active(r.Value.GetPhase()) {
		return nil // it ended: its content is in force (or re-applying it would have re-rolled)
	}
	return &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
		"rollout %s of these intents is running with strategy %s; a running rollout's strategy cannot be changed, and nothing was stored: "+
			"let it finish (sluice rollout status --watch), or stop it (sluice rollout abort) and then apply again with the new strategy",
		id, strategyJSON(head.GetStrategy()))}
}

// strategyJSON is st as one line of JSON, "{}" for the defaults.
func strategyJSON(st *sluicev1.Strategy) string {
	b, err := store.Marshal(st)
	if err != nil || len(b) == 0 {
		return "{}"
	}
	return string(b)
}

// keysOf is the intents keys of ins.
func keysOf(ins []*sluicev1.Intent) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = intent.Key(in)
	}
	return out
}
