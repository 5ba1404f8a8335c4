package coordinator

// The re-reads the decider asks for (rollout.ReadStatuses,
// rollout.ReadDesired) and the verify listing of the nodeconfigs keys: the
// loop performs each read and hands the answer back to Decide as an event.

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// desiredKeys is one listing of the nodeconfigs bucket's keys.
type desiredKeys struct {
	started time.Time // when the listing began
	keys    map[string]bool
	err     error
}

// listDesired lists the nodeconfigs bucket's keys (off the loop's
// goroutine: a fleet's listing takes a while).
func (lp *loop) listDesired(ctx context.Context) desiredKeys {
	out := desiredKeys{started: time.Now(), keys: map[string]bool{}}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keys, err := lp.nodeconfigs.Keys(lctx)
	for _, k := range keys {
		out.keys[k] = true
	}
	out.err = err
	return out
}

// listedEvent is a listing as DesiredListed, nil when it failed (the next
// interval lists again).
func (lp *loop) listedEvent(l desiredKeys) rollout.Event {
	if l.err != nil {
		lp.log.Warn().Err(l.err).Msg("verify desired configs: listing the bucket failed; trying again later")
		return nil
	}
	return rollout.DesiredListed{Keys: l.keys, Started: l.started}
}

// desiredGone reads, from the nodeconfigs stream's leader, whether node's
// desired config is gone (never written, deleted or purged), bounded by
// AttemptTimeout.
func (lp *loop) desiredGone(ctx context.Context, node string) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	_, live, err := lp.desiredLast(rctx, contract.DesiredKey(node))
	return !live, err
}

// readDesired performs a ReadDesired and returns its answer (nil when
// nothing changes). A write of the loop's own to the key, in flight or
// landed since the listing that missed it began, is the truth to come:
// nothing is read then. A read that fails changes nothing.
func (lp *loop) readDesired(ctx context.Context, a rollout.ReadDesired) rollout.Event {
	answer := rollout.DesiredRead{Node: a.Node, P: a.P}
	recent := !a.Listed.IsZero() && !lp.keys.landed(a.Node).Before(a.Listed)
	if lp.busyWriting(a.Node) || recent {
		return answerOrNil(answer)
	}
	log := lp.log.With().Str(logging.FieldNode, a.Node).Str(logging.FieldReason, a.Why).Logger()
	gone, err := lp.desiredGone(ctx, a.Node)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("reading a desired config again failed: trusting the last one written; trying again later")
	case !gone:
		log.Debug().Msg("desired config read again: still there")
	default:
		log.Info().Msg("desired config gone from the bucket (deleted while this coordinator did not hear of it): the node is configured afresh")
		lp.forgetConfigs(a.Node)
		answer.Gone = true
	}
	return answerOrNil(answer)
}

// answerOrNil is a, or nil when it changes nothing (no key gone, no
// presence waiting).
func answerOrNil(a rollout.DesiredRead) rollout.Event {
	if !a.Gone && a.P == nil {
		return nil
	}
	return a
}

// readStatuses performs a ReadStatuses: the statuses read together,
// bounded by AttemptTimeout, answered with those newer than the watch
// delivered. A read that fails or finds nothing changes nothing, and the
// deadline takes its course.
func (lp *loop) readStatuses(ctx context.Context, a rollout.ReadStatuses) rollout.Event {
	got := make([]store.Entry[*sluicev1.NodeStatus], len(a.Nodes))
	rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, node := range a.Nodes {
		wg.Go(func() {
			if e, err := lp.status.Get(rctx, node); err == nil {
				got[i] = e
			}
		})
	}
	wg.Wait()
	var answer rollout.Rechecked
	for _, e := range got {
		if e.Value == nil || e.Revision <= lp.keys.statusRev(e.Key) {
			continue // nothing read, or the watch delivered it (or newer)
		}
		lp.keys.setStatusRev(e.Key, e.Revision)
		e.Value.Node = e.Key
		lp.cfg.Metrics.nodePhase(e.Key, e.Value)
		lp.log.Info().Str(logging.FieldNode, e.Key).Uint64("kv_revision", e.Revision).Str("phase", e.Value.GetPhase().String()).
			Msg("status read again at its deadline: the watch had not delivered it")
		answer.Statuses = append(answer.Statuses, e.Value)
	}
	return answer
}
