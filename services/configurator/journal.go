package configurator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The apply journal (revisions/pending) makes an apply all or nothing
// across crashes. An apply writes it before its first intent, holding the
// batch and, for every intent it will write, the key as it was (PriorIntent).
// Whoever finds a journal — the apply that wrote it, the next apply, Run at
// start — finishes it: it writes what is not written yet, moves the head and
// removes the journal. When that cannot succeed however often it is tried
// (cannotComplete), it rolls the apply back instead: every intent the apply
// wrote gets its prior value back, and the journal is removed.

// finished is how finishing a journal ended.
type finished struct {
	head             *sluicev1.Head // after; nil when rolled back
	created, updated []string       // intents written now
	rolledBack       error          // why the apply was rolled back; nil when it landed
}

// finish completes the apply in journal j or rolls it back (see above).
// reason gives the head's reason from the intents written now. in is the
// stored state the change was planned from (nil: a journal found, not
// planned here): the head is moved from it once the journal's writes
// landed, with no second read, unless the head moved meanwhile. An error
// means neither happened and the journal stays.
func (s *Service) finish(ctx context.Context, j store.Entry[*sluicev1.ApplyJournal], reason func(created, updated []string) string, in *inputs) (finished, error) {
	jr := j.Value
	created, updated, err := s.writeJournal(ctx, jr)
	var head *sluicev1.Head
	if err == nil {
		why := func(diff) string { return reason(created, updated) }
		var after *inputs
		if in != nil {
			landed := in.landed(jr)
			after = &landed
		}
		head, err = s.advance(ctx, jr.GetStrategy(), false, jr.GetRequestId(), jr.GetProvenance(), why, after)
		if after != nil && errors.Is(err, store.ErrConflict) {
			// Another configurator moved the head after the change was
			// planned: its change is in the bucket, so read it again.
			head, err = s.advance(ctx, jr.GetStrategy(), false, jr.GetRequestId(), jr.GetProvenance(), why, nil)
		}
	}
	if err != nil {
		if !cannotComplete(err) {
			return finished{}, err
		}
		if rerr := s.rollBack(ctx, j, err); rerr != nil {
			return finished{}, fmt.Errorf("roll back an apply that cannot complete (%v): %w", err, rerr)
		}
		return finished{rolledBack: err}, nil
	}
	if err := s.st.journal.Delete(ctx, contract.KeyPending, j.Revision); err != nil {
		// Finishing it again later writes nothing and moves nothing.
		s.log.Warn().Err(err).Str(logging.FieldBucket, s.st.journal.Bucket()).Str(logging.FieldKey, contract.KeyPending).
			Msg("remove apply journal")
	}
	return finished{head: head, created: created, updated: updated}, nil
}

// writeJournal writes every intent of the journal that is not stored yet,
// each with compare-and-set on the revision the apply saw (PriorIntent), and
// returns the IDs it created and updated. An intent already holding the
// journal's spec is skipped, so running it again after a crash is harmless.
func (s *Service) writeJournal(ctx context.Context, jr *sluicev1.ApplyJournal) (created, updated []string, err error) {
	prior := map[string]*sluicev1.PriorIntent{}
	for _, p := range jr.GetPrior() {
		prior[p.GetKey()] = p
	}
	for _, in := range render.Sorted(jr.GetIntents()) {
		id, key := intent.ID(in), intent.Key(in)
		cur, err := s.st.intents.Get(ctx, key)
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUndecodable):
		default:
			return created, updated, fmt.Errorf("write intent %s: %w", id, err)
		}
		if v := cur.Value; v != nil && !v.GetMarkedForDeletion() && proto.Equal(v.GetIntent(), in) {
			continue // written already, or unchanged by the apply
		}
		if jr.GetHasPrior() {
			// Anything but the revision the apply saw is someone else's write.
			if p, ok := prior[key]; !ok || p.GetKvRevision() != cur.Revision {
				return created, updated, &changedSinceError{id: id}
			}
		}
		next := &sluicev1.StoredIntent{Intent: in, Source: jr.GetSource(), Origin: jr.GetOrigins()[key], UpdatedAt: timestamppb.New(s.cfg.Now())}
		if err := s.fits("intent "+id, next); err != nil {
			return created, updated, err
		}
		if _, err := s.st.intents.Update(ctx, key, next, cur.Revision); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return created, updated, &changedSinceError{id: id}
			}
			return created, updated, fmt.Errorf("write intent %s: %w", id, err)
		}
		from := "applied from " + jr.GetSource()
		if o := next.GetOrigin(); o != "" {
			from = "declared by registry " + jr.GetSource() + " in " + o
		}
		evType, why := "IntentUpdated", from+" with a changed spec"
		switch {
		case cur.Value == nil:
			evType, why = "IntentCreated", from
		case cur.Value.GetMarkedForDeletion():
			// Explicit, never silent: the intent was on its way out.
			evType, why = "IntentUnmarked", fmt.Sprintf("%s while marked for deletion (source %s): no longer marked, back in the next revision",
				from, cur.Value.GetSource())
		case cur.Value.GetSource() != jr.GetSource():
			why += " (it came from " + cur.Value.GetSource() + " before)"
		}
		if evType != "IntentUpdated" {
			created = append(created, id)
		} else {
			updated = append(updated, id)
		}
		s.events.Emit(&sluicev1.Event{Kind: events.KindIntent, Id: key, Type: evType, Reason: id + " " + why})
	}
	for _, key := range jr.GetMark() {
		cur, err := s.st.intents.Get(ctx, key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // gone already
		case err != nil && !errors.Is(err, store.ErrUndecodable):
			return created, updated, fmt.Errorf("mark intent %s: %w", key, err)
		}
		if cur.Value.GetMarkedForDeletion() {
			continue // marked already, or by an earlier run of this journal
		}
		if p, ok := prior[key]; !ok || p.GetKvRevision() != cur.Revision {
			return created, updated, &changedSinceError{id: key}
		}
		marked := &sluicev1.StoredIntent{Intent: cur.Value.GetIntent(), Source: cur.Value.GetSource(), Origin: cur.Value.GetOrigin(),
			MarkedForDeletion: true, UpdatedAt: timestamppb.New(s.cfg.Now())}
		if _, err := s.st.intents.Update(ctx, key, marked, cur.Revision); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return created, updated, &changedSinceError{id: key}
			}
			return created, updated, fmt.Errorf("mark intent %s: %w", key, err)
		}
		why := fmt.Sprintf("%s is not in the revision %s goes back to", key, jr.GetSource())
		switch jr.GetSource() {
		case contract.SourceAPI: // only a delete marks from the API
			why = intent.ID(cur.Value.GetIntent()) + " deleted"
		case contract.SourceUndo:
		default:
			why = fmt.Sprintf("%s is no longer declared by registry %s", key, jr.GetSource())
			if o := cur.Value.GetOrigin(); o != "" {
				why += " (it was in " + o + ")"
			}
		}
		s.events.Emit(&sluicev1.Event{Kind: events.KindIntent, Id: key, Type: "IntentMarkedForDeletion",
			Reason: why + "; the next revision leaves it out and the reaper removes it once nothing references it"})
	}
	return created, updated, nil
}

// rollBack undoes the apply in journal j, which cannot complete because of
// cause: every intent that holds what the apply wrote gets back the value
// the journal recorded for it (or is removed if it did not exist), then the
// journal is removed. An intent someone else changed since is left alone.
//
// A journal written before priors were recorded (HasPrior false) is rolled
// back to the head revision instead: each intent it wrote gets the head's
// spec for that intent, or is removed if the head has none.
func (s *Service) rollBack(ctx context.Context, j store.Entry[*sluicev1.ApplyJournal], cause error) error {
	jr := j.Value
	wrote := map[string]*sluicev1.Intent{}
	for _, in := range jr.GetIntents() {
		wrote[intent.Key(in)] = in
	}
	priors := jr.GetPrior()
	basis := "the values the apply journal recorded"
	if !jr.GetHasPrior() {
		var err error
		if priors, basis, err = s.priorsFromHead(ctx, jr); err != nil {
			return err
		}
	}
	slices.SortFunc(priors, func(a, b *sluicev1.PriorIntent) int { return strings.Compare(a.GetKey(), b.GetKey()) })
	var restored, removed []string
	for _, p := range priors {
		in, ok := wrote[p.GetKey()]
		if !ok {
			if slices.Contains(jr.GetMark(), p.GetKey()) {
				ok, err := s.unmark(ctx, p)
				if err != nil {
					return err
				}
				if ok {
					restored = append(restored, p.GetKey())
				}
			}
			continue
		}
		id := intent.ID(in)
		cur, err := s.st.intents.Get(ctx, p.GetKey())
		switch {
		case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUndecodable):
			continue // not what the apply wrote
		case err != nil:
			return err
		}
		if v := cur.Value; v.GetMarkedForDeletion() || !proto.Equal(v.GetIntent(), in) {
			continue // never written by the apply, or changed by someone since
		}
		if p.GetValue() == nil {
			if err := s.st.intents.Delete(ctx, p.GetKey(), cur.Revision); err != nil {
				return fmt.Errorf("remove intent %s: %w", id, err)
			}
			removed = append(removed, id)
			continue
		}
		if pv := p.GetValue(); !pv.GetMarkedForDeletion() && proto.Equal(pv.GetIntent(), cur.Value.GetIntent()) {
			continue // the same spec as before: nothing to undo
		}
		if _, err := s.st.intents.Update(ctx, p.GetKey(), p.GetValue(), cur.Revision); err != nil {
			return fmt.Errorf("restore intent %s: %w", id, err)
		}
		restored = append(restored, id)
	}
	if err := s.st.journal.Delete(ctx, contract.KeyPending, j.Revision); err != nil {
		return fmt.Errorf("remove apply journal: %w", err)
	}
	parts := []string{fmt.Sprintf("rolled back an apply of %s from %q that cannot complete: %v",
		contract.Plural(len(jr.GetIntents()), "intent"), jr.GetSource(), cause)}
	if len(restored) > 0 {
		parts = append(parts, "restored "+someIDs(restored)+" from "+basis)
	}
	if len(removed) > 0 {
		parts = append(parts, "removed "+someIDs(removed)+", which the apply had created")
	}
	if len(restored)+len(removed) == 0 {
		parts = append(parts, "it had written no intent")
	}
	reason := strings.Join(parts, "; ")
	s.log.Error().Str(logging.FieldBucket, s.st.journal.Bucket()).Str(logging.FieldKey, contract.KeyPending).
		Str(logging.FieldReason, reason).Msg("apply rolled back")
	s.events.Emit(&sluicev1.Event{Kind: events.KindRevision, Id: contract.KeyPending, Type: "ApplyRolledBack", Reason: reason})
	return nil
}

// unmark gives a key the journal marked for deletion its prior value back,
// if it still holds the mark the journal made; true when it did.
func (s *Service) unmark(ctx context.Context, p *sluicev1.PriorIntent) (bool, error) {
	pv := p.GetValue()
	if pv == nil || pv.GetMarkedForDeletion() {
		return false, nil // it was not live before: nothing to undo
	}
	cur, err := s.st.intents.Get(ctx, p.GetKey())
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUndecodable):
		return false, nil
	case err != nil:
		return false, err
	}
	if !cur.Value.GetMarkedForDeletion() || !proto.Equal(cur.Value.GetIntent(), pv.GetIntent()) {
		return false, nil // not the journal's mark, or changed by someone since
	}
	if _, err := s.st.intents.Update(ctx, p.GetKey(), pv, cur.Revision); err != nil {
		return false, fmt.Errorf("unmark intent %s: %w", p.GetKey(), err)
	}
	return true, nil
}

// priorsFromHead stands in for the priors an older journal did not record:
// each intent it names as the head revision holds it, or absent.
func (s *Service) priorsFromHead(ctx context.Context, jr *sluicev1.ApplyJournal) ([]*sluicev1.PriorIntent, string, error) {
	head, err := s.readHead(ctx)
	if err != nil {
		return nil, "", err
	}
	inHead := map[string]*sluicev1.Intent{}
	if id := head.Value.GetRevision(); id != "" {
		rev, err := s.st.revisions.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrUndecodable):
			s.quarantine.Report(s.st.revisions.Bucket(), id, rev.Revision, err,
				"rolling back an older apply journal as if the head revision held no intent")
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, "", err
		}
		for _, in := range rev.Value.GetIntents() {
			inHead[intent.Key(in)] = in
		}
	}
	var out []*sluicev1.PriorIntent
	for _, in := range jr.GetIntents() {
		key := intent.Key(in)
		p := &sluicev1.PriorIntent{Key: key}
		if h, ok := inHead[key]; ok {
			p.Value = &sluicev1.StoredIntent{Intent: h, Source: jr.GetSource(), UpdatedAt: timestamppb.New(s.cfg.Now())}
		}
		out = append(out, p)
	}
	return out, "head revision " + shortOrNone(head.Value.GetRevision()) + " (the journal predates recorded priors)", nil
}

// rollForward finishes an apply whose journal was left behind by a crash
// or a failure, or rolls it back. A journal that does not decode is
// reported and removed: nothing can be done with it, and leaving it would
// refuse every later apply. An error means the journal stays for the next try.
func (s *Service) rollForward(ctx context.Context) error {
	j, err := s.st.journal.Get(ctx, contract.KeyPending)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case errors.Is(err, store.ErrUndecodable):
		s.quarantine.Report(s.st.journal.Bucket(), contract.KeyPending, j.Revision, err,
			"removed it: the apply it recorded can be neither completed nor rolled back; the stored intents are reconciled as they are")
		if derr := s.st.journal.Delete(ctx, contract.KeyPending, j.Revision); derr != nil && !errors.Is(derr, store.ErrNotFound) {
			return fmt.Errorf("remove unreadable apply journal: %w", derr)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read apply journal: %w", err)
	}
	jr := j.Value
	s.log.Warn().Int("intents", len(jr.GetIntents())).Bool("priors", jr.GetHasPrior()).Msg("finishing an interrupted apply")
	_, err = s.finish(ctx, j, func(created, updated []string) string {
		return applyReason(len(jr.GetIntents()), created, updated) + " (completed after an interruption)"
	}, nil)
	if err != nil {
		return fmt.Errorf("finish interrupted apply: %w", err)
	}
	return nil
}
