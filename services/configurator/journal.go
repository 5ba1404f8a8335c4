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
//
// Finishing is the forward path of every change (finish, commit.go); this
// file holds the rest of the journal's life: rolling an apply back
// (rollBack) and finishing a journal left behind (rollForward).

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
