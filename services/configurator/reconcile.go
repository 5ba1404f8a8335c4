package configurator

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Level-triggered repair, run at start, on every reconnect and resume and
// after a failure (the watch step of Run): reconcile cuts a revision and
// moves the head when the stored intents differ from it; repairHead writes
// an unreadable head again, and repairRevisionKey reconciles when a
// revision turns unreadable, so that advance's repairRevision writes it
// again from the intents whose content it is; heal is repairHead and
// reconcile.

// reconcile completes an interrupted apply and moves the head if the stored
// intents differ from it.
func (s *Service) reconcile(ctx context.Context) error {
	end, held := s.gate.Begin()
	if held != nil {
		s.log.Info().Str(logging.FieldReason, contract.DescribePause(held)).Msg("reconcile waits for resume: the control plane is paused")
		return nil
	}
	defer end()
	if err := s.mu.Lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.rollForward(ctx); err != nil {
		return err
	}
	if err := s.refuseLost(ctx, "reconciling the head with the stored intents"); err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.code == contract.ErrCodeStoreLost {
			return nil // said once (refuseLost); an operator's recover lifts it
		}
		return err
	}
	in, err := s.readStored(ctx)
	if err != nil {
		return err
	}
	lost := ""
	if in.headErr != nil {
		restored, why, err := s.restoreHead(ctx, &in)
		if restored || err != nil {
			return err
		}
		lost, in.strategyLost = "; "+why, true
	}
	cur := in.head
	_, err = s.advance(ctx, cur.Value.GetStrategy(), false, "", nil, func(d diff) string {
		return fmt.Sprintf("reconciled: the stored intents differ from head revision %s (%s)%s", shortOrNone(cur.Value.GetRevision()), d, lost)
	}, &in)
	var inv *invalidStateError
	var tooLarge *tooLargeError
	var unknown *inForceUnknown
	switch {
	case errors.As(err, &unknown):
		// Retrying would not change it: an apply or delete of those
		// intents, or a readable head, does. Applies answer the same.
		s.log.Error().Err(err).Msg("an unreadable stored intent's version in force cannot be read; the head stays where it is")
		return nil
	case errors.As(err, &inv):
		// Someone wrote the intents bucket by hand. Keep the head where it
		// is; applies show the problems until they are fixed.
		ev := s.log.Error().Int("problems", len(inv.errs))
		for i, fe := range inv.errs[:min(len(inv.errs), maxListedErrors)] {
			ev = ev.Str(fmt.Sprintf("problem%d", i+1), formatFieldError(fe))
		}
		ev.Msg("the stored intents are invalid; the head stays where it is")
		return nil
	case errors.As(err, &tooLarge):
		// Stored before the limits were checked (or max_payload was lowered
		// since): no revision can hold them. Deleting intents fixes it.
		s.log.Error().Err(err).Msg("the stored intents do not fit in one revision; the head stays where it is")
		return nil
	}
	return err
}

// heal repairs an unreadable head and reconciles: after a failure, a
// resume or a reconnect, when a repair the watch asked for may not have
// been made (held by the pause, or its read failed) and no new write of
// the head will ask again. A repair that reconciled is not followed by a
// second reconcile.
func (s *Service) heal(ctx context.Context) error {
	reconciled, err := s.repairHead(ctx)
	if reconciled {
		return err
	}
	return errors.Join(err, s.reconcile(ctx))
}

// headRepair is what repairHead does after reading the head.
type headRepair int

const (
	headFine      headRepair = iota // readable again, or gone: nothing to repair
	headBehind                      // the read is older than the unreadable head the watch saw: look again
	headUnknown                     // the read failed: look again
	headRewrite                     // write the head this process last wrote over it
	headReconcile                   // this process wrote none: cut a head from the stored intents
)

// planHeadRepair decides repairHead's step from its read of the head (the
// entry's revision and the read's error), the revision of the newest
// unreadable head the watch delivered (0: none) and whether this process
// wrote a head.
//
// A direct get may be answered by any replica of the bucket, one still
// catching up among them: a readable value at a revision below the
// unreadable one the watch delivered is that replica's, not a repair, and
// is no answer. Taken for "readable again", it left the garbage for good,
// as no later write of the head came to show it again (chaos seed 75: the
// garbage came 20 ms after an R3 cluster's server stopped). An error
// other than "undecodable" is no answer either.
func planHeadRepair(readRev uint64, err error, unreadableAt uint64, wroteOne bool) headRepair {
	switch {
	case err == nil && readRev < unreadableAt:
		return headBehind
	case err == nil, errors.Is(err, store.ErrNotFound):
		return headFine
	case !errors.Is(err, store.ErrUndecodable):
		return headUnknown
	case wroteOne:
		return headRewrite
	}
	return headReconcile
}

// sawUnreadableHead remembers the revision of an unreadable head the
// watch delivered, keeping the newest.
func (s *Service) sawUnreadableHead(rev uint64) {
	for {
		cur := s.unreadableHead.Load()
		if rev <= cur || s.unreadableHead.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// repairHead writes revisions/head again when it holds a value that does
// not decode or is not well-formed: the head this process last wrote, at
// the same generation (nothing else wrote the head since, or the value
// would be that write), or, if this process wrote none, a head cut from
// the stored intents as at start (reconcile: the next generation).
// planHeadRepair decides which from the read; reconciled says it
// reconciled to do so. An error leaves the repair to the retry (heal).
func (s *Service) repairHead(ctx context.Context) (reconciled bool, err error) {
	end, held := s.gate.Begin()
	if held != nil {
		return false, nil // the resume heals (heal)
	}
	defer end()
	if err := s.mu.Lock(ctx); err != nil {
		return false, err
	}
	e, err := s.st.head.Get(ctx, contract.KeyHead)
	last := s.lastHead.Load()
	seen := s.unreadableHead.Load()
	switch planHeadRepair(e.Revision, err, seen, last != nil) {
	case headFine:
		s.unreadableHead.CompareAndSwap(seen, 0) // a newer one seen since stays
		s.mu.Unlock()
		return false, nil
	case headBehind:
		s.mu.Unlock()
		return false, fmt.Errorf("read the head to see whether it needs repair: the answer is revision %d, older than the unreadable revision %d the watch delivered (a replica still catching up)", e.Revision, seen)
	case headUnknown:
		s.mu.Unlock()
		return false, fmt.Errorf("read the head to see whether it needs repair: %w", err)
	case headRewrite:
		defer s.mu.Unlock()
		if _, uerr := s.st.head.Update(ctx, contract.KeyHead, last, e.Revision); uerr != nil {
			return false, fmt.Errorf("rewrite the unreadable head: %w", uerr)
		}
		s.unreadableHead.CompareAndSwap(seen, 0)
		s.quarantine.Rewritten(s.st.head.Bucket(), contract.KeyHead, e.Revision, err,
			fmt.Sprintf("the head this configurator last wrote (revision %s, generation %d)", render.Short(last.GetRevision()), last.GetGeneration()))
		return false, nil
	}
	s.mu.Unlock()
	if err := s.reconcile(ctx); err != nil {
		return true, err
	}
	s.unreadableHead.CompareAndSwap(seen, 0)
	return true, nil
}

// repairRevisionKey reconciles when revision key does not decode: reconcile
// rewrites the head's revision from the stored intents, whose content it is
// (advance), and writes the head again. Another revision's content is not
// stored anywhere else: it stays unreadable, reported by its readers.
func (s *Service) repairRevisionKey(ctx context.Context, key string) error {
	if _, err := s.st.revisions.Get(ctx, key); !errors.Is(err, store.ErrUndecodable) {
		return nil // readable, gone, or unknown: a read error is not garbage
	}
	return s.reconcile(ctx)
}

// repairRevision rewrites revision rev when the value stored under its id
// does not decode (rewritten: it did). Any readable value there has the same content: the id is
// its hash.
func (s *Service) repairRevision(ctx context.Context, rev *sluicev1.Revision) (rewritten bool, err error) {
	e, err := s.st.revisions.Get(ctx, rev.GetId())
	switch {
	case err == nil, errors.Is(err, store.ErrNotFound):
		return false, nil
	case !errors.Is(err, store.ErrUndecodable):
		return false, fmt.Errorf("read revision %s: %w", render.Short(rev.GetId()), err)
	}
	if _, err := s.st.revisions.Update(ctx, rev.GetId(), rev, e.Revision); err != nil {
		return false, fmt.Errorf("rewrite unreadable revision %s: %w", render.Short(rev.GetId()), err)
	}
	s.quarantine.Rewritten(s.st.revisions.Bucket(), rev.GetId(), e.Revision, err,
		"the revision made from the stored intents, whose content has this id")
	return true, nil
}
