package configurator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Committing a change, from the lock to the head: beginChange takes s.mu
// for it, commit writes the apply journal and finishes it (finish:
// writeJournal writes its intents, advance moves the head to the revision
// of the effective set, keeping in force what cannot be read, keepInForce).
// A journal that cannot complete is rolled back, and one left behind is
// finished at the next change (journal.go).

// beginChange takes s.mu for a change a request asks for (what names it in
// a refusal), after finishing a leftover journal, and refuses it while the
// store is lost. The error is an *apiError to answer with; on success the
// caller calls unlock when done.
func (s *Service) beginChange(ctx context.Context, what string) (unlock func(), err error) {
	if err := s.mu.Lock(ctx); err != nil {
		return nil, unavailable(err)
	}
	if err := s.rollForward(ctx); err != nil {
		s.mu.Unlock()
		return nil, unavailable(err)
	}
	if err := s.refuseLost(ctx, what); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return s.mu.Unlock, nil
}

// commit writes journal and finishes it: from the journal's write on the
// change is committed, and if anything after fails, the journal makes this
// request, the next one or the next start finish it (or roll it back). in
// is the stored state the change was planned from (finish). The error is an
// *apiError for the caller to answer with.
func (s *Service) commit(ctx context.Context, journal *sluicev1.ApplyJournal, reason func(created, updated []string) string, in *inputs) (finished, error) {
	jrev, err := s.st.journal.Create(ctx, contract.KeyPending, journal)
	if errors.Is(err, store.ErrConflict) {
		return finished{}, &apiError{code: contract.ErrCodeConflict, desc: "another configurator is applying right now; retry"}
	}
	if err != nil {
		return finished{}, unavailable(err)
	}
	done, err := s.finish(ctx, store.Entry[*sluicev1.ApplyJournal]{Key: contract.KeyPending, Value: journal, Revision: jrev}, reason, in)
	if err != nil {
		return finished{}, interrupted(err)
	}
	if done.rolledBack != nil {
		return finished{}, rolledBack(done.rolledBack)
	}
	return done, nil
}

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

// keepInForce adds to eff the head revision's version of every intent
// whose stored value is unreadable: what cannot be read is no evidence that
// it is gone, and leaving it out would remove it from every node. It stays
// as it is in force until it is applied again (which overwrites it) or
// deleted. When the head's revision cannot be read either, or the head
// itself (readHead's stand-in names no revision), no revision is cut: the
// error (an *inForceUnknown) names the keys. Only with no head at all is
// nothing in force to keep. read is the effective set of the readable
// intents as read before this change (inputs.read).
func (s *Service) keepInForce(ctx context.Context, eff []*sluicev1.Intent, unreadable map[string]uint64, head *sluicev1.Head, read []*sluicev1.Intent) ([]*sluicev1.Intent, error) {
	if len(unreadable) == 0 || head == nil {
		return eff, nil // nothing unreadable, or no head yet: nothing in force to keep
	}
	unknown := func(what string) error {
		ids := make([]string, 0, len(unreadable))
		for _, k := range slices.Sorted(maps.Keys(unreadable)) {
			ids = append(ids, idOfKey(k))
		}
		return &inForceUnknown{api: &apiError{code: contract.ErrCodeConflict, desc: fmt.Sprintf(
			"the stored values of %s are unreadable, and %s: "+
				"no revision is cut, so that nothing is removed from the nodes by mistake; apply them again or delete them (sluice delete), then retry",
			strings.Join(ids, ", "), what)}}
	}
	if head.GetRevision() == "" {
		// The head does not decode (chaos seed 1272: a restarted
		// configurator cut a revision without the unreadable intent, which
		// removed it from every node).
		return nil, unknown("the head, which names the revision holding the version in force, cannot be read")
	}
	e, err := s.st.revisions.Get(ctx, head.GetRevision())
	if err != nil && render.RevisionID(read) == head.GetRevision() {
		// A revision's id is the hash of its intents: the head's revision
		// holds the readable intents as read and nothing else, so no
		// unreadable key is in force (garbage in a key no intent was
		// ever stored under: chaos seed 665, where it also kept the
		// head's revision from being rewritten).
		return eff, nil
	}
	if err != nil {
		return nil, unknown(fmt.Sprintf("the head's revision %s, which holds the version in force, cannot be read (%v)", render.Short(head.GetRevision()), err))
	}
	out := slices.Clone(eff)
	for _, in := range e.Value.GetIntents() {
		if _, ok := unreadable[intent.Key(in)]; ok {
			out = append(out, in)
		}
	}
	render.Sort(out)
	return out, nil
}

// advance cuts a revision from the stored effective set and moves the head
// to it, unless the head already holds that content. why describes the
// change for the head's reason. It returns the head as it stands after.
// requestID is the apply request moving the head ("" for other causes); the
// head records it so that the same request sent again is answered, not re-applied.
// src is where the change came from (a registry's sync, with its git
// commit; nil for the API's changes): the head records it and its events
// name it, and it is no part of the revision's content.
// in is the stored state the change was planned from, as it stands now
// (nil: read it); a head that moved since (another configurator's change)
// fails the head's compare-and-set with store.ErrConflict.
func (s *Service) advance(ctx context.Context, strategy *sluicev1.Strategy, reroll bool, requestID string, src *sluicev1.Source,
	why func(diff) string, in *inputs) (*sluicev1.Head, error) {
	if in == nil {
		read, err := s.readStored(ctx)
		if err != nil {
			return nil, err
		}
		in = &read
	}
	cur := in.head
	eff, err := s.keepInForce(ctx, change.Effective(in.live), in.unreadable, cur.Value, in.read)
	if err != nil {
		return nil, err
	}
	id := render.RevisionID(eff)
	if cur.Value != nil && cur.Value.GetRevision() == id && !reroll {
		// The head stays; its revision is rewritten if it holds a value
		// that does not decode (content-addressed: the stored intents are
		// its content). Else no coordinator that had not read it before
		// could start or render it (chaos seed 23).
		rev := &sluicev1.Revision{Id: id, Intents: eff, CreatedAt: timestamppb.New(s.cfg.Now())}
		rewritten, err := s.repairRevision(ctx, rev)
		if err != nil || !rewritten {
			return cur.Value, err
		}
		// A coordinator reads a head's revision when the head moves, and
		// does not roll out one it could not read: the same head written
		// again makes it read the revision again.
		if _, err := s.st.head.Update(ctx, contract.KeyHead, cur.Value, cur.Revision); err != nil {
			return nil, fmt.Errorf("announce the rewritten revision %s: %w", render.Short(id), err)
		}
		return cur.Value, nil
	}
	if cur.Value == nil && len(eff) == 0 {
		return &sluicev1.Head{}, nil // nothing declared, nothing to roll out
	}
	if errs := intent.Validate(eff); len(errs) > 0 {
		return nil, &invalidStateError{errs: errs}
	}
	now := timestamppb.New(s.cfg.Now())
	rev := &sluicev1.Revision{Id: id, Intents: eff, CreatedAt: now}
	if err := s.fits("the revision ("+contract.Plural(len(eff), "intent")+")", rev); err != nil {
		return nil, err
	}
	var prev []*sluicev1.Intent
	if prevID := cur.Value.GetRevision(); prevID != "" {
		p, err := s.st.revisions.Get(ctx, prevID)
		switch {
		case errors.Is(err, store.ErrUndecodable):
			s.quarantine.Report(s.st.revisions.Bucket(), prevID, p.Revision, err,
				"the head's revision is unreadable: the next revision's changes are described as if it held no intent")
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		prev = p.Value.GetIntents()
	}
	d := diffSets(prev, eff)
	from := ""
	if line := contract.SourceLine(src); line != "" {
		from = "; from " + line
	}
	_, err = s.st.revisions.Create(ctx, id, rev)
	switch {
	case errors.Is(err, store.ErrConflict):
		// Content-addressed: the same content was a revision before, unless
		// what is stored under its id does not decode; then it is rewritten.
		if _, err := s.repairRevision(ctx, rev); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("write revision %s: %w", render.Short(id), err)
	default:
		s.events.Emit(&sluicev1.Event{Kind: events.KindRevision, Id: id, Type: "RevisionCreated", Revision: id,
			Reason: fmt.Sprintf("revision %s of %d intents, from %s: %s%s", render.Short(id), len(eff), shortOrNone(cur.Value.GetRevision()), d, from)})
	}
	next := &sluicev1.Head{
		Revision: id, Generation: cur.Value.GetGeneration() + 1, Strategy: strategy, UpdatedAt: now, Reason: why(d),
		RequestId: requestID, StrategyLost: in.strategyLost, Source: src,
	}
	if _, err := s.st.head.Update(ctx, contract.KeyHead, next, cur.Revision); err != nil {
		return nil, fmt.Errorf("move head to %s: %w", render.Short(id), err)
	}
	s.lastHead.Store(next)
	s.events.Emit(&sluicev1.Event{Kind: events.KindRevision, Id: id, Type: "HeadMoved", Revision: id,
		Reason: fmt.Sprintf("head moved from %s to %s, generation %d: %s%s",
			shortOrNone(cur.Value.GetRevision()), render.Short(id), next.Generation, next.Reason, from)})
	return next, nil
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
			parts = append(parts, p.verb+" "+someIDs(p.ids))
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
		parts = append(parts, "created "+someIDs(created))
	}
	if len(updated) > 0 {
		parts = append(parts, "updated "+someIDs(updated))
	}
	if unchanged := n - len(created) - len(updated); unchanged > 0 && len(parts) > 0 {
		parts = append(parts, contract.Thousands(unchanged)+" unchanged")
	}
	if len(parts) == 0 {
		return "applied " + contract.Plural(n, "intent")
	}
	return "applied " + contract.Plural(n, "intent") + ": " + strings.Join(parts, "; ")
}

func shortOrNone(id string) string {
	if id == "" {
		return "none"
	}
	return render.Short(id)
}

func nowProto(now func() time.Time) *timestamppb.Timestamp { return timestamppb.New(now()) }

func formatFieldError(fe *sluicev1.FieldError) string { return intent.FormatFieldError(fe) }
