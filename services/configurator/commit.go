package configurator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// invalidStateError: the effective set in the intents bucket breaks the
// rules, so no revision is cut from it.
type invalidStateError struct{ errs []*sluicev1.FieldError }

func (e *invalidStateError) Error() string {
	return fmt.Sprintf("the stored intents break %d rules", len(e.errs))
}

// readHead returns the head entry; a zero entry (nil Value) when there is none yet.
func (s *Service) readHead(ctx context.Context) (store.Entry[*sluicev1.Head], error) {
	e, err := s.st.head.Get(ctx, contract.KeyHead)
	if errors.Is(err, store.ErrNotFound) {
		return store.Entry[*sluicev1.Head]{Key: contract.KeyHead}, nil
	}
	return e, err
}

// liveIntents returns every stored intent by key, marked ones included.
func (s *Service) liveIntents(ctx context.Context) (map[string]store.Entry[*sluicev1.StoredIntent], error) {
	entries, err := s.st.intents.List(ctx, ">")
	if err != nil {
		return nil, err
	}
	out := make(map[string]store.Entry[*sluicev1.StoredIntent], len(entries))
	for _, e := range entries {
		if e.Value.GetIntent() != nil {
			out[e.Key] = e
		}
	}
	return out, nil
}

// effective is the set a revision is cut from: every stored intent not
// marked for deletion, in canonical order.
func effective(live map[string]store.Entry[*sluicev1.StoredIntent]) []*sluicev1.Intent {
	var out []*sluicev1.Intent
	for _, e := range live {
		if !e.Value.GetMarkedForDeletion() {
			out = append(out, e.Value.GetIntent())
		}
	}
	render.Sort(out)
	return out
}

// writeIntents upserts the intents of req, each with compare-and-set. An
// intent equal to the stored one (source aside) is not written; a marked
// one is un-marked. It is idempotent, so an interrupted apply can be
// completed by running it again.
func (s *Service) writeIntents(ctx context.Context, req *sluicev1.ApplyRequest, revision string) (created, updated []string, err error) {
	for _, in := range render.Sorted(req.GetIntents()) {
		id := intent.ID(in)
		var evType, reason string
		_, err := s.st.intents.Mutate(ctx, intent.Key(in), func(cur *sluicev1.StoredIntent) (*sluicev1.StoredIntent, error) {
			evType, reason = "", "" // Mutate retries this on a conflict
			switch {
			case cur == nil:
				evType, reason = "IntentCreated", "applied from "+req.GetSource()
			case cur.GetMarkedForDeletion():
				evType, reason = "IntentCreated", "applied from "+req.GetSource()+" while marked for deletion; no longer marked"
			case proto.Equal(cur.GetIntent(), in):
				return nil, store.ErrUnchanged
			default:
				evType, reason = "IntentUpdated", "applied from "+req.GetSource()+" with a changed spec"
			}
			return &sluicev1.StoredIntent{
				Intent: in, Source: req.GetSource(), UpdatedAt: timestamppb.New(s.cfg.Now()),
			}, nil
		})
		if err != nil {
			return created, updated, fmt.Errorf("write intent %s: %w", id, err)
		}
		if evType == "" {
			continue
		}
		if evType == "IntentCreated" {
			created = append(created, id)
		} else {
			updated = append(updated, id)
		}
		s.events.Emit(&sluicev1.Event{Kind: events.KindIntent, Id: intent.Key(in), Type: evType, Revision: revision,
			Reason: fmt.Sprintf("%s %s", id, reason)})
	}
	return created, updated, nil
}

// advance cuts a revision from the stored effective set and moves the head
// to it, unless the head already holds that content. why describes the
// change for the head's reason. It returns the head as it stands after.
func (s *Service) advance(ctx context.Context, strategy *sluicev1.Strategy, reroll bool, why func(diff) string) (*sluicev1.Head, error) {
	live, err := s.liveIntents(ctx)
	if err != nil {
		return nil, err
	}
	eff := effective(live)
	cur, err := s.readHead(ctx)
	if err != nil {
		return nil, err
	}
	id := render.RevisionID(eff)
	if cur.Value != nil && cur.Value.GetRevision() == id && !reroll {
		return cur.Value, nil
	}
	if cur.Value == nil && len(eff) == 0 {
		return &sluicev1.Head{}, nil // nothing declared, nothing to roll out
	}
	if errs := intent.Validate(eff); len(errs) > 0 {
		return nil, &invalidStateError{errs: errs}
	}
	var prev []*sluicev1.Intent
	if cur.Value != nil {
		p, err := s.st.revisions.Get(ctx, cur.Value.GetRevision())
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		prev = p.Value.GetIntents()
	}
	d := diffSets(prev, eff)
	now := timestamppb.New(s.cfg.Now())
	_, err = s.st.revisions.Create(ctx, id, &sluicev1.Revision{Id: id, Intents: eff, CreatedAt: now})
	switch {
	case errors.Is(err, store.ErrConflict):
		// Content-addressed: the same content was a revision before.
	case err != nil:
		return nil, fmt.Errorf("write revision %s: %w", render.Short(id), err)
	default:
		s.events.Emit(&sluicev1.Event{Kind: events.KindRevision, Id: id, Type: "RevisionCreated", Revision: id,
			Reason: fmt.Sprintf("revision %s of %d intents, from %s: %s", render.Short(id), len(eff), shortOrNone(cur.Value.GetRevision()), d)})
	}
	next := &sluicev1.Head{
		Revision: id, Generation: cur.Value.GetGeneration() + 1, Strategy: strategy, UpdatedAt: now, Reason: why(d),
	}
	if _, err := s.st.head.Update(ctx, contract.KeyHead, next, cur.Revision); err != nil {
		return nil, fmt.Errorf("move head to %s: %w", render.Short(id), err)
	}
	s.events.Emit(&sluicev1.Event{Kind: events.KindRevision, Id: id, Type: "HeadMoved", Revision: id,
		Reason: fmt.Sprintf("head moved from %s to %s, generation %d: %s",
			shortOrNone(cur.Value.GetRevision()), render.Short(id), next.Generation, next.Reason)})
	return next, nil
}

// rollForward completes an apply whose journal was left behind by a crash
// or a failure: it writes the journal's intents, moves the head and removes
// the journal.
func (s *Service) rollForward(ctx context.Context) error {
	j, err := s.st.journal.Get(ctx, contract.KeyPending)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read apply journal: %w", err)
	}
	req := j.Value
	s.log.Warn().Int("intents", len(req.GetIntents())).Msg("completing an interrupted apply")
	created, updated, err := s.writeIntents(ctx, req, "")
	if err != nil {
		return fmt.Errorf("complete interrupted apply: %w", err)
	}
	_, err = s.advance(ctx, req.GetStrategy(), false, func(diff) string {
		return applyReason(len(req.GetIntents()), created, updated) + " (completed after an interruption)"
	})
	var inv *invalidStateError
	if errors.As(err, &inv) {
		// Cannot happen unless the bucket was edited by hand since the apply
		// was validated; the intents are stored, applies report the problems.
		s.log.Error().Err(err).Msg("completed an interrupted apply, but the stored intents are invalid; the head stays")
	} else if err != nil {
		return fmt.Errorf("complete interrupted apply: %w", err)
	}
	if err := s.st.journal.Delete(ctx, contract.KeyPending, j.Revision); err != nil {
		return fmt.Errorf("remove apply journal: %w", err)
	}
	return nil
}

// diff is what changed between two sets of intents, by ID.
type diff struct{ added, changed, removed []string }

func diffSets(prev, next []*sluicev1.Intent) diff {
	before := map[string]*sluicev1.Intent{}
	for _, in := range prev {
		before[intent.ID(in)] = in
	}
	var d diff
	for _, in := range next {
		id := intent.ID(in)
		old, ok := before[id]
		switch {
		case !ok:
			d.added = append(d.added, id)
		case !proto.Equal(old, in):
			d.changed = append(d.changed, id)
		}
		delete(before, id)
	}
	for id := range before {
		d.removed = append(d.removed, id)
	}
	slices.Sort(d.added)
	slices.Sort(d.changed)
	slices.Sort(d.removed)
	return d
}

func (d diff) String() string {
	var parts []string
	for _, p := range []struct {
		verb string
		ids  []string
	}{{"added", d.added}, {"changed", d.changed}, {"removed", d.removed}} {
		if len(p.ids) > 0 {
			parts = append(parts, p.verb+" "+strings.Join(p.ids, ", "))
		}
	}
	if len(parts) == 0 {
		return "no intent changed"
	}
	return strings.Join(parts, "; ")
}

// applyReason is the head's reason after an apply: "applied 3 intents: created a; updated b".
func applyReason(n int, created, updated []string) string {
	var parts []string
	if len(created) > 0 {
		parts = append(parts, "created "+strings.Join(created, ", "))
	}
	if len(updated) > 0 {
		parts = append(parts, "updated "+strings.Join(updated, ", "))
	}
	if unchanged := n - len(created) - len(updated); unchanged > 0 && len(parts) > 0 {
		parts = append(parts, fmt.Sprintf("%d unchanged", unchanged))
	}
	noun := "intents"
	if n == 1 {
		noun = "intent"
	}
	if len(parts) == 0 {
		return fmt.Sprintf("applied %d %s", n, noun)
	}
	return fmt.Sprintf("applied %d %s: %s", n, noun, strings.Join(parts, "; "))
}

func shortOrNone(id string) string {
	if id == "" {
		return "none"
	}
	return render.Short(id)
}

func nowProto(now func() time.Time) *timestamppb.Timestamp { return timestamppb.New(now()) }

func formatFieldError(fe *sluicev1.FieldError) string { return intent.FormatFieldError(fe) }
