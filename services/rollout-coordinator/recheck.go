package coordinator

// Re-reads the loop makes for the decider: the verify listing of the
// nodeconfigs keys, a returning node's desired key, and overdue statuses.

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

// verify compares the desired configs the state believes in the bucket
// with a listing of its keys, and steps a node whose key is gone as
// reaped, so that it is configured afresh: a deletion the loop never heard
// of (the reaper deletes a node's keys, and only a status deletion tells
// the loop; chaos seed 160) must not leave a node unconfigured until its
// agent restarts. A node with a write of the loop's own queued, or landed
// since the listing began, is left alone: the listing may predate it.
func (lp *loop) verify(ctx context.Context, l desiredKeys) error {
	if l.err != nil {
		lp.log.Warn().Err(l.err).Msg("verify desired configs: listing the bucket failed; trying again later")
		return nil
	}
	for _, node := range lp.st.Configured() {
		if l.keys[contract.DesiredKey(node)] {
			continue
		}
		busy := lp.busyWriting(node)
		lp.landedMu.Lock()
		recent := !lp.landedAt[node].Before(l.started)
		lp.landedMu.Unlock()
		if busy || recent {
			continue
		}
		// A listing may end early (under concurrent writes, and on a
		// cluster): only the stream leader's word that the key is gone counts.
		if gone, err := lp.desiredGone(ctx, node); err != nil || !gone {
			if err != nil {
				lp.log.Warn().Err(err).Str(logging.FieldNode, node).Msg("verify desired configs: could not confirm a key missing from the listing; trying again later")
			} else {
				lp.log.Debug().Str(logging.FieldNode, node).Msg("verify desired configs: the listing missed its key; the stream's leader has it")
			}
			continue
		}
		lp.log.Info().Str(logging.FieldNode, node).Msg("its desired config is gone from the bucket (deleted while this coordinator did not hear of it): configured afresh")
		lp.forgetConfigs(node)
		if err := lp.step(ctx, rollout.Reaped{Node: node}); err != nil {
			return err
		}
	}
	return nil
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

// returning reads the desired config of a node coming back (or whose
// agent restarted), before the state trusts the one it last wrote there
// (State.Returning): the reaper
// may have deleted it after the reap the state saw (chaos seed 160: a
// lagging presence view configured the departed node, the reaper deleted
// that write too, no status deletion told the loop, and the node came back
// to a coordinator that believed it configured). A key found gone is
// stepped as a reap, so the node is configured afresh. A write of the
// loop's own still in flight is the truth to come: nothing is read then. A
// read that fails changes nothing.
func (lp *loop) returning(ctx context.Context, node string, p *sluicev1.NodePresence) error {
	if !lp.st.Returning(node, p) {
		return nil
	}
	if lp.busyWriting(node) {
		return nil
	}
	gone, err := lp.desiredGone(ctx, node)
	switch {
	case err == nil && gone:
		lp.log.Info().Str(logging.FieldNode, node).Msg("node back and its desired config is gone (reaped while it was away): it is configured afresh")
		lp.forgetConfigs(node)
		return lp.step(ctx, rollout.Reaped{Node: node})
	case err != nil:
		lp.log.Warn().Err(err).Str(logging.FieldNode, node).Msg("node back: reading its desired config failed; trusting the last one written")
	}
	return nil
}

// recheckOverdue reads, from the bucket, the status of every node the next
// Tick would time out, and steps each one newer than the watch delivered:
// the deadline rule is decide's (State.Overdue), the reads are the loop's.
// The reads run together, bounded by AttemptTimeout; one that fails or
// finds nothing changes nothing, and the deadline takes its course.
func (lp *loop) recheckOverdue(ctx context.Context) error {
	late := lp.st.Overdue(lp.cfg.Now())
	if len(late) == 0 {
		return nil
	}
	got := make([]store.Entry[*sluicev1.NodeStatus], len(late))
	rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, node := range late {
		wg.Go(func() {
			if e, err := lp.status.Get(rctx, node); err == nil {
				got[i] = e
			}
		})
	}
	wg.Wait()
	for _, e := range got {
		if e.Value == nil || e.Revision <= lp.statusRev[e.Key] {
			continue // nothing read, or the watch delivered it (or newer)
		}
		lp.seenStatus(e.Key, e.Revision)
		e.Value.Node = e.Key
		lp.cfg.Metrics.nodePhase(e.Key, e.Value)
		lp.log.Info().Str("node", e.Key).Uint64("kv_revision", e.Revision).Str("phase", e.Value.GetPhase().String()).
			Msg("status read again at its deadline: the watch had not delivered it")
		if err := lp.step(ctx, rollout.Status{S: e.Value}); err != nil {
			return err
		}
	}
	return nil
}
