package configurator

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The reads every verb starts from, in one place: the stored intents and
// the head (readStored, once per request, as inputs), the head alone, the
// checked head of a verb that moves it without intents (headFor), and the
// rollouts an answer names (runningRollout, queuedBehind).

// inputs is what a change is planned from, read once per request: the
// stored intents (readable ones by key, marked ones included; unreadable
// ones by KV revision, see liveIntents) and the head. read is the
// effective set of the readable intents as read, before any change planned
// from them landed: what keepInForce checks against the head's revision.
type inputs struct {
	live       map[string]change.Stored
	unreadable map[string]uint64
	head       store.Entry[*sluicev1.Head]
	headErr    error // why the stored head is unreadable; nil when it is not
	// The strategy of the head this change replaces is known nowhere
	// (restoreHead): the head written says so (Head.strategy_lost).
	strategyLost bool
	read         []*sluicev1.Intent
}

// readStored reads the stored intents (one listing) and the head.
func (s *Service) readStored(ctx context.Context) (inputs, error) {
	live, unreadable, err := s.liveIntents(ctx)
	if err != nil {
		return inputs{}, err
	}
	head, headErr, err := s.readHeadNoting(ctx)
	if err != nil {
		return inputs{}, err
	}
	return inputs{live: live, unreadable: unreadable, head: head, headErr: headErr, read: change.Effective(live)}, nil
}

// landed is in once journal j landed (change.Landed), the head and the
// set as read.
func (in inputs) landed(j *sluicev1.ApplyJournal) inputs {
	live, unreadable := change.Landed(in.live, in.unreadable, j)
	return inputs{live: live, unreadable: unreadable, head: in.head, headErr: in.headErr, read: in.read}
}

// readHead returns the head entry; a zero entry (nil Value) when there is
// none yet. A head that does not decode is reported and stands in as an
// empty head whose generation is the key's KV revision: the next head is
// written over it with compare-and-set, at a generation above any the key
// held before (every head write took a KV revision and raised the
// generation by one).
func (s *Service) readHead(ctx context.Context) (store.Entry[*sluicev1.Head], error) {
	e, _, err := s.readHeadNoting(ctx)
	return e, err
}

// readHeadNoting is readHead that also returns why the stored head is
// unreadable (nil when it is readable or absent).
func (s *Service) readHeadNoting(ctx context.Context) (store.Entry[*sluicev1.Head], error, error) {
	e, err := s.st.head.Get(ctx, contract.KeyHead)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Entry[*sluicev1.Head]{Key: contract.KeyHead}, nil, nil
	case errors.Is(err, store.ErrUndecodable):
		s.quarantine.Report(s.st.head.Bucket(), contract.KeyHead, e.Revision, err,
			fmt.Sprintf("treated as no head at generation %d; the next revision replaces it", e.Revision))
		return store.Entry[*sluicev1.Head]{Key: contract.KeyHead, Revision: e.Revision, Value: &sluicev1.Head{Generation: e.Revision}}, err, nil
	}
	return e, nil, err
}

// liveIntents returns every readable stored intent by key, marked ones
// included, and the KV revision of every key whose value does not decode:
// those are reported and left out of the sets read here (a revision cut
// keeps their version in force: advance), and an apply of that intent
// overwrites them.
func (s *Service) liveIntents(ctx context.Context) (map[string]store.Entry[*sluicev1.StoredIntent], map[string]uint64, error) {
	entries, err := s.st.intents.List(ctx, ">")
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]store.Entry[*sluicev1.StoredIntent], len(entries))
	unreadable := map[string]uint64{}
	for _, e := range entries {
		if e.Err != nil {
			unreadable[e.Key] = e.Revision
			s.quarantine.Report(s.st.intents.Bucket(), e.Key, e.Revision, e.Err,
				"its version in the head's revision stays in force until it is applied again (which overwrites it) or deleted")
			continue
		}
		out[e.Key] = e
	}
	return out, unreadable, nil
}

// headFor checks a request that moves the head without intents (undo,
// retry) and reads the head, with s.mu held: replayed says the request id
// already moved it (answer with the head, do nothing again).
func (s *Service) headFor(ctx context.Context, what string, st *sluicev1.Strategy, requestID string) (head store.Entry[*sluicev1.Head], replayed bool, err error) {
	if errs := intent.ValidateStrategy(st); len(errs) > 0 {
		return head, false, invalid("the request", errs)
	}
	if err := s.rollForward(ctx); err != nil {
		return head, false, unavailable(err)
	}
	if head, err = s.readHead(ctx); err != nil {
		return head, false, unavailable(err)
	}
	if head.Value == nil {
		return head, false, &apiError{code: contract.ErrCodeNotFound, desc: "nothing has been applied yet: there is nothing to " + what}
	}
	replayed = requestID != "" && head.Value.GetRequestId() == requestID
	if !replayed && proto.Size(st) > 0 {
		// The strategy rules only: the content is a revision's that ran
		// (undo) or the head's own (retry), and an undo in an emergency is
		// not refused for what that content was then.
		if _, err := s.verifyFleet(ctx, "the "+what+"'s strategy", nil, st, false); err != nil {
			return head, false, err
		}
	}
	return head, replayed, nil
}

// runningRollout is the rollout running when the head moved to h, other
// than h's own: h's rollout waits for it (or stops it). "" when none, or
// when it cannot be read (the answer is informative only).
func (s *Service) runningRollout(ctx context.Context, h *sluicev1.Head) string {
	ref, err := s.st.refs.Get(ctx, contract.KeyActive)
	if err != nil || ref.Value.GetRollout() == contract.RolloutID(h.GetGeneration(), h.GetRevision()) {
		return ""
	}
	return ref.Value.GetRollout()
}

// queuedBehind is the rollout the head's own waits for while it has not
// started (its record does not exist yet), "" otherwise: an apply that
// changes nothing says so, for it is why nothing seems to happen.
func (s *Service) queuedBehind(ctx context.Context, h *sluicev1.Head) string {
	if h == nil {
		return ""
	}
	if _, err := s.st.rollouts.Get(ctx, contract.RolloutID(h.GetGeneration(), h.GetRevision())); !errors.Is(err, store.ErrNotFound) {
		return ""
	}
	return s.runningRollout(ctx, h)
}
