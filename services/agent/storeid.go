package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The store's identity (control/store.id, a StoreID its bucket manager
// creates once: pkg/buckets). The agent's fences — the highest leader epoch
// accepted (intake.epoch) and the highest nodeconfigs revision offered
// (mailbox.seen) — are counts of one store: a store lost and started afresh
// counts both from 1 again, and an agent that kept running through the loss
// would take every config of the new store for a deposed leader's. So the
// agent remembers the id it found at start and, only when it is about to
// refuse a desired config as stale, reads the id again: another, non-empty
// id means another store, whose counts are not comparable with the ones it
// remembers. Then it forgets them and takes the config. Nothing is read in
// steady state.

// readStoreID is the store's identity now: "" when there is none (a store
// whose manager predates it, or one just created, before its manager wrote
// it). An error is a read that failed or a value that does not decode.
func (a *Agent) readStoreID(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	e, err := a.storeIDs.Get(ctx, contract.KeyStoreID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return e.Value.GetId(), nil
}

// learnStoreID remembers the store's identity at start. A failed read
// remembers none: the first stale-looking config then reads it again (and
// adopts it, see storeReplaced), so nothing is lost but one replacement
// that happened before the agent could read any id.
func (a *Agent) learnStoreID(ctx context.Context) {
	id, err := a.readStoreID(ctx)
	if err != nil {
		a.warnUnlessDone(ctx, err, fmt.Sprintf("read %s/%s (the store's identity); a store replaced before it is read again is not told apart",
			contract.BucketControl, contract.KeyStoreID))
		return
	}
	a.in.storeID = id
	a.pz.mu.Lock()
	a.pz.storeID = id
	a.pz.mu.Unlock()
	a.log.Debug().Str("store_id", id).Msg("store identity")
}

// storeReplaced is asked before a desired config is refused as stale (why
// says how: a lower leader epoch, a lower nodeconfigs revision). It reads
// the store's identity: when the agent remembered one and the store now
// holds another, the store was replaced (lost and started afresh, or
// restored into a new one), the agent's fences belonged to the old store:
// it logs and emits NodeStoreReplaced once, forgets the highest epoch and
// revision it saw, remembers the new id, and returns true (take d). Same
// id, no id, or a read that fails: false, refused as before — the
// deposed-leader fence holds, and an answer the agent could not get is no
// proof the store changed.
func (a *Agent) storeReplaced(d desired, why, from string) bool {
	if a.storeIDs == nil {
		return false
	}
	now, err := a.readStoreID(context.Background())
	if err != nil {
		a.log.Warn().Err(err).Str("from", from).Str(logging.FieldReason, why).
			Msgf("could not read %s/%s to tell a replaced store from a deposed leader; the desired config is refused as stale", contract.BucketControl, contract.KeyStoreID)
		return false
	}
	was := a.in.storeID
	if was == "" || now == "" || now == was {
		if was == "" && now != "" {
			// Not known at start: from now on a replacement is told apart.
			a.in.storeID = now
		}
		return false
	}
	reason := fmt.Sprintf("the store was replaced (%s/%s was %s, is now %s): desired %s has %s, counts of the old store; "+
		"forgetting the old store's leader epoch %d and nodeconfigs revision %d and taking it",
		contract.BucketControl, contract.KeyStoreID, was, now, describe(d.cfg), why, a.in.epoch, a.box.highest())
	a.log.Info().Str("store_id_was", was).Str("store_id", now).Uint64("kv_revision", d.rev).
		Uint64("leader_epoch", d.cfg.GetLeaderEpoch()).Str("from", from).Str(logging.FieldReason, reason).
		Msg("store replaced; the epoch and revision fences start again")
	a.emit(EventNodeStoreReplaced, reason, d.cfg)
	a.in.storeID = now
	a.in.epoch = 0
	a.in.staleRev = 0
	a.box.forget()
	return true
}

// pauseStoreReplaced is asked before a pause request r is ignored as older
// than the one held (held): the pause's generations count in one store as
// the desired configs' epochs do, and a store lost and started afresh
// counts them from 1 again, so an agent that kept running would ignore the
// new store's pause and resume until their generations passed the old
// store's. It reads the store's identity; when the pause was counted in
// another store, the agent forgets the old store's request and its
// acknowledgement (whose generation would stand over every lower one,
// contract.NextAck), emits NodeStoreReplaced, and returns true (take r).
// Same id, no id or a read that fails: false, ignored as before.
func (a *Agent) pauseStoreReplaced(held, r *sluicev1.PauseRequest, from string) bool {
	if a.storeIDs == nil {
		return false
	}
	now, err := a.readStoreID(context.Background())
	if err != nil {
		a.log.Warn().Err(err).Str("from", from).
			Msgf("could not read %s/%s to tell a replaced store from an older pause request; %s is kept", contract.BucketControl, contract.KeyStoreID, describePause(held))
		return false
	}
	p := &a.pz
	p.mu.Lock()
	was := p.storeID
	if was == "" || now == "" || now == was || p.req != held {
		if was == "" {
			p.storeID = now // not known at start: from now on a replacement is told apart
		}
		p.mu.Unlock()
		return false
	}
	p.storeID, p.ack = now, nil
	p.mu.Unlock()
	reason := fmt.Sprintf("the store was replaced (%s/%s was %s, is now %s): the new store's pause request is %s, the one held (%s) is the old store's; "+
		"forgetting it", contract.BucketControl, contract.KeyStoreID, was, now, describePause(r), describePause(held))
	a.log.Info().Str("store_id_was", was).Str("store_id", now).Str("from", from).Str(logging.FieldReason, reason).
		Msg("store replaced; the pause fence starts again")
	a.emit(EventNodeStoreReplaced, reason, nil)
	return true
}

// pauseGone is told that control/pause does not exist while the agent
// holds a request: deleted in the same store (the request stays in force
// until a newer one, docs/operations.md), or a replaced store that was
// never paused, whose agents must not stay held by the old store's
// request. The store's identity is read once per request held.
func (a *Agent) pauseGone(from string) {
	p := &a.pz
	p.mu.Lock()
	held, checked := p.req, p.goneChecked
	p.goneChecked = true
	p.mu.Unlock()
	if held == nil || checked || !a.pauseStoreReplaced(held, nil, from) {
		return
	}
	p.mu.Lock()
	if p.req == held {
		p.req = nil
	}
	p.mu.Unlock()
	signal(p.wake)
	a.updateAck()
}

// describePause is contract.DescribePause, or "none" for no request.
func describePause(r *sluicev1.PauseRequest) string {
	if r == nil {
		return "none"
	}
	return contract.DescribePause(r)
}
