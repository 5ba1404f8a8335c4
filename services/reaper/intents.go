package reaper

import (
	"context"
	"errors"
	"fmt"
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
	if len(marked) == 0 {
		return nil
	}
	if _, err := h.revisions.Get(ctx, contract.KeyPending); err == nil || !errors.Is(err, store.ErrNotFound) {
		if err != nil {
			return fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, contract.KeyPending, err)
		}
		r.log.Debug().Msg("an apply is in progress: marked intents are collected after it")
		return nil
	}
	used, err := r.referencedIntents(ctx, h)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range marked {
		if used[e.Key] {
			continue
		}
		err := h.intents.Delete(ctx, e.Key, e.Revision)
		switch {
		case errors.Is(err, store.ErrConflict):
			continue // written since it was read (re-applied?): the next pass looks again
		case err != nil:
			errs = append(errs, fmt.Errorf("delete intent %s: %w", e.Key, err))
			continue
		}
		reason := fmt.Sprintf("marked for deletion (source %s) and no longer in the head, the active or the last-applied revision, "+
			"nor in any node's desired or backup config; deleted", orUnknown(e.Value.GetSource()))
		r.log.Info().Str("intent", e.Key).Str(logging.FieldReason, reason).Msg("intent reaped")
		h.em.Emit(&sluicev1.Event{Kind: contract.KindIntent, Id: e.Key, Type: EventIntentReaped, Reason: reason})
	}
	return errors.Join(errs...)
}

// referencedIntents is the set of intent keys in every referenced revision.
func (r *Reaper) referencedIntents(ctx context.Context, h *handles) (map[string]bool, error) {
	var revs []string
	head, err := h.heads.Get(ctx, contract.KeyHead)
	switch {
	case err == nil:
		revs = append(revs, head.Value.GetRevision())
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("read the head: %w", err)
	}
	for _, key := range []string{contract.KeyActive, contract.KeyLastApplied} {
		ref, err := h.rollouts.Get(ctx, key)
		switch {
		case err == nil:
			revs = append(revs, ref.Value.GetRevision())
		case !errors.Is(err, store.ErrNotFound):
			return nil, fmt.Errorf("read rollouts/%s: %w", key, err)
		}
	}
	configs, err := h.configs.List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("list node configs: %w", err)
	}
	for _, c := range configs {
		switch {
		case contract.IsControlKey(c.Key):
		case c.Err != nil:
			return nil, fmt.Errorf("node config %s does not decode: which revision it needs is unknown: %w", c.Key, c.Err)
		default:
			revs = append(revs, c.Value.GetRevision())
		}
	}
	slices.Sort(revs)
	used := map[string]bool{}
	for _, id := range slices.Compact(revs) {
		if id == "" {
			continue
		}
		rev, err := h.revs.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue // gone: it contains nothing to keep
		case err != nil:
			return nil, fmt.Errorf("read revision %s: %w", id, err)
		}
		for _, in := range rev.Value.GetIntents() {
			used[intent.Key(in)] = true
		}
	}
	return used, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
