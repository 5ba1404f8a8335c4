package configurator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// SourceUndo is the source recorded on intents an undo writes back.
const SourceUndo = contract.SourceUndo

// undo makes an earlier revision's intents the stored set again: every
// intent of that revision is written back as it has it, every other live
// intent is marked for deletion, and the head moves to it as a new
// generation — one all-or-nothing change through the apply journal, rolled
// out under the same safety rules as any apply (a known-bad config is
// refused now).
func (s *Service) undo(ctx context.Context, req *sluicev1.UndoRequest) (*sluicev1.UndoResponse, error) {
	if err := s.mu.Lock(ctx); err != nil {
		return nil, unavailable(err)
	}
	defer s.mu.Unlock()
	head, replayed, err := s.headFor(ctx, "undo", req.GetStrategy(), req.GetRequestId())
	if err != nil {
		return nil, err
	}
	if replayed {
		return &sluicev1.UndoResponse{Revision: head.Value.GetRevision(), Generation: head.Value.GetGeneration(), Replayed: true}, nil
	}
	target, err := s.undoTarget(ctx, head.Value, req.GetToRevision())
	if err != nil {
		return nil, err
	}
	rev, err := s.st.revisions.Get(ctx, target)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, &apiError{code: contract.ErrCodeNotFound, desc: fmt.Sprintf("revision %s is not stored (sluice get revisions lists them)", render.Short(target))}
	case err != nil:
		return nil, unavailable(fmt.Errorf("read revision %s: %w", render.Short(target), err))
	}
	if target == head.Value.GetRevision() {
		return nil, &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
			"revision %s is the head already; to roll it out again after it rolled back or was aborted use: sluice rollout retry", render.Short(target))}
	}
	in, err := s.readStored(ctx)
	if err != nil {
		return nil, unavailable(err)
	}
	set := rev.Value.GetIntents()
	if errs := intent.Validate(set); len(errs) > 0 {
		return nil, invalid("revision "+render.Short(target), errs)
	}
	if err := s.refuseKnownBad(ctx, &sluicev1.Revision{Id: target, Intents: set}, req.GetStrategy()); err != nil {
		return nil, err
	}
	plan := change.Undo(in.live, in.unreadable, set)
	journal := &sluicev1.ApplyJournal{Strategy: req.GetStrategy(), Source: SourceUndo, HasPrior: true, RequestId: req.GetRequestId(),
		Intents: plan.Writes, Mark: plan.Mark, Prior: plan.Prior}
	resp := &sluicev1.UndoResponse{FromRevision: head.Value.GetRevision(), Marked: plan.Marked}
	for _, w := range plan.Writes {
		resp.Restored = append(resp.Restored, intent.ID(w))
	}
	if err := s.checkFits(journal, journal.GetIntents(), plan.Set, target); err != nil {
		return nil, err
	}
	// The head read first (headFor) is the one the change moves from.
	in.head = head
	done, err := s.commit(ctx, journal, func(_, _ []string) string {
		return fmt.Sprintf("undo: back to revision %s from %s (%d intents written back, %d marked for deletion)",
			render.Short(target), render.Short(resp.GetFromRevision()), len(resp.GetRestored()), len(resp.GetMarked()))
	}, &in)
	if err != nil {
		return nil, err
	}
	resp.Revision, resp.Generation = done.head.GetRevision(), done.head.GetGeneration()
	resp.WaitsFor = s.runningRollout(ctx, done.head)
	return resp, nil
}

// undoTarget is the revision an undo goes back to: the one asked for (an id
// or a unique prefix), or by default the revision in force when the head is
// not (its rollout rolled back, was aborted or still runs), else the
// revision in force before the head's.
func (s *Service) undoTarget(ctx context.Context, head *sluicev1.Head, asked string) (string, error) {
	if asked != "" {
		return s.resolveRevision(ctx, asked)
	}
	last, err := s.st.refs.Get(ctx, contract.KeyLastApplied)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", &apiError{code: contract.ErrCodeConflict, desc: "no revision has been in force yet: name one with --to-revision (sluice get revisions)"}
	case errors.Is(err, store.ErrUndecodable):
		s.quarantine.Report(s.st.refs.Bucket(), contract.KeyLastApplied, last.Revision, err,
			"which revision is in force is unknown: an undo names its revision with --to-revision")
		return "", &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
			"which revision is in force is unknown (%s/%s does not decode): name one with --to-revision (sluice get revisions)", s.st.refs.Bucket(), contract.KeyLastApplied)}
	case err != nil:
		return "", unavailable(fmt.Errorf("read the revision in force: %w", err))
	}
	if last.Value.GetRevision() != head.GetRevision() {
		return last.Value.GetRevision(), nil
	}
	r, err := s.st.rollouts.Get(ctx, last.Value.GetRollout())
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUndecodable) { // unreadable: no earlier revision known
		return "", unavailable(fmt.Errorf("read rollout %s: %w", last.Value.GetRollout(), err))
	}
	if prev := r.Value.GetPreviousRevision(); prev != "" {
		return prev, nil
	}
	return "", &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
		"the head %s is in force and no earlier revision was: name one with --to-revision (sluice get revisions)", render.Short(head.GetRevision()))}
}

// resolveRevision finds the stored revision id that is id or starts with it.
func (s *Service) resolveRevision(ctx context.Context, id string) (string, error) {
	if len(id) < 6 {
		return "", &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf("--to-revision %q: give at least 6 characters of the revision id", id)}
	}
	keys, err := s.st.revisions.Keys(ctx)
	if err != nil {
		return "", unavailable(fmt.Errorf("list revisions: %w", err))
	}
	var match []string
	for _, k := range keys {
		if k != contract.KeyHead && k != contract.KeyPending && !contract.IsControlKey(k) && strings.HasPrefix(k, id) {
			match = append(match, k)
		}
	}
	switch len(match) {
	case 0:
		return "", &apiError{code: contract.ErrCodeNotFound, desc: fmt.Sprintf("no stored revision starts with %s (sluice get revisions lists them)", id)}
	case 1:
		return match[0], nil
	}
	sort.Strings(match)
	return "", &apiError{code: contract.ErrCodeInvalid, desc: fmt.Sprintf("%d revisions start with %s: give more characters", len(match), id)}
}
