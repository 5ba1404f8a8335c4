package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// EventIntentReaped: an intent marked for deletion was deleted once nothing
// referenced it any more (kind intent, id <kind>.<name>).
const EventIntentReaped = "IntentReaped"

// CollectIntents deletes every intent marked for deletion that no
// referenced revision contains: the head, the active and the last-applied
// rollout's, and every revision a node's desired or backup config came from
// (a revert may put it back). Each delete is compare-and-set on the revision
// it checked, so an intent re-applied (un-marked) meanwhile stays. Nothing is
// deleted while an apply is in progress (revisions/pending: its roll-forward
// or rollback may write the intent back), or when anything referenced cannot
// be read.
func (r *Reaper) CollectIntents(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.open(ctx)
	if err != nil {
		return err
	}
	all, err := h.intents.List(ctx, ">")
	if err != nil {
		return fmt.Errorf("list intents: %w", err)
	}
	var marked []store.Entry[*sluicev1.StoredIntent]
	for _, e := range all {
		if e.Err == nil && e.Value.GetMarkedForDeletion() {
			marked = append(marked, e)
		}
	}
	kept := map[string]string{} // what this pass keeps, and why: the status endpoint says it
	defer func() { r.keptIntents(kept) }()
	keepAll := func(why string) {
		for _, e := range marked {
			kept[e.Key] = why
		}
	}
	if len(marked) == 0 {
		return nil
	}
	if hold, err := r.holdForLoss(ctx, h); hold || err != nil {
		keepAll(whyLost)
		if err != nil {
			keepAll(fmt.Sprintf("whether the store is lost cannot be told (%v): nothing is deleted until it can", err))
		}
		return err
	}
	if busy, err := applyInProgress(ctx, h); err != nil || busy {
		keepAll(whyApplying)
		if err != nil {
			keepAll(fmt.Sprintf("whether an apply is in progress cannot be read (%v): nothing is deleted until it can", err))
		}
		return err // an apply in progress: after it
	}
	used, caughtUp, err := r.referencedIntents(ctx, h)
	if err != nil {
		keepAll(fmt.Sprintf("what references it cannot be read (%v): nothing is deleted until it can", err))
		return r.unreadableStops(h, err)
	}
	if !caughtUp {
		// A superseded head the coordinator has not passed yet may name
		// these intents (inUse.caughtUp).
		keepAll(whyBehind)
		r.log.Debug().Int("marked", len(marked)).Msg("intents wait: the coordinator has not started the head yet")
		return nil
	}
	var errs []error
	for _, e := range marked {
		if why := used[e.Key]; why != "" {
			kept[e.Key] = why
			continue
		}
		err := h.intents.Delete(ctx, e.Key, e.Revision)
		switch {
		case errors.Is(err, store.ErrConflict):
			continue // written since it was read (re-applied?): the next pass looks again
		case err != nil:
			kept[e.Key] = fmt.Sprintf("its delete failed (%v): the next pass tries again", err)
			errs = append(errs, fmt.Errorf("delete intent %s: %w", e.Key, err))
			continue
		}
		reason := fmt.Sprintf("marked for deletion (source %s) and no longer in the head, the active or the last-applied revision, "+
			"nor in any node's desired or backup config; deleted", cmp.Or(e.Value.GetSource(), "unknown"))
		r.log.Info().Str("intent", e.Key).Str(logging.FieldReason, reason).Msg("intent reaped")
		h.em.Emit(&sluicev1.Event{Kind: contract.KindIntent, Id: e.Key, Type: EventIntentReaped, Reason: reason})
		r.deletedSome(KindIntents, 1)
	}
	return errors.Join(errs...)
}

// Why a pass keeps every intent marked for deletion.
const (
	whyApplying = "an apply is in progress (revisions/pending): its roll-forward or rollback may write it back; deleted after it"
	whyBehind   = "the coordinator has not started the head yet (a head just superseded may name it); deleted once it has"
	whyLost     = "the store is taken as lost: the reaper deletes nothing until an operator recovers or restores it (docs/operations.md, \"Disaster recovery\")"
)

// referencedIntents is the intent keys in every revision in use, each
// with why it is kept (inUse.reason), and whether the coordinator has
// started the head (inUse.caughtUp).
func (r *Reaper) referencedIntents(ctx context.Context, h *handles) (map[string]string, bool, error) {
	inUse, err := revisionsInUse(ctx, h)
	if err != nil {
		return nil, false, err
	}
	if !inUse.caughtUp() {
		return nil, false, nil
	}
	used := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(inUse.revs)) {
		rev, err := h.revs.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // gone: it contains nothing to keep
		case errors.Is(err, store.ErrUndecodable):
			return nil, false, &unreadableError{bucket: contract.BucketRevisions, key: id, rev: rev.Revision, err: err}
		case err != nil:
			return nil, false, fmt.Errorf("read revision %s: %w", id, err)
		}
		why := inUse.reason(id)
		for _, in := range rev.Value.GetIntents() {
			if k := intent.Key(in); used[k] == "" {
				used[k] = why
			}
		}
	}
	return used, true, nil
}

// keptIntents keeps what the pass decided of the intents marked for
// deletion it did not delete, grouped by reason, for the status endpoint
// (contract.ReaperStatus.Kept): sluice get intents shows it.
func (r *Reaper) keptIntents(kept map[string]string) {
	byWhy := map[string][]string{}
	for key, why := range kept {
		byWhy[why] = append(byWhy[why], key)
	}
	groups := make([]contract.KeptIntents, 0, len(byWhy))
	for _, why := range slices.Sorted(maps.Keys(byWhy)) {
		groups = append(groups, contract.KeptIntents{Reason: why, Intents: slices.Sorted(slices.Values(byWhy[why]))})
	}
	r.statusMu.Lock()
	r.kept, r.keptAt = groups, r.cfg.Now()
	r.statusMu.Unlock()
}
