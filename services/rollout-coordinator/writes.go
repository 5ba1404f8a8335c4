package coordinator

// Desired-config writes: the writer pool, what landed, and the progress
// held back by the save interval.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/contract/wellformed"
	"github.com/sluicehq/sluice/pkg/logging"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// noteLanded records that w's write landed, for a Written event.
func (lp *loop) noteLanded(w rollout.WriteDesired) {
	lp.keys.setLanded(w.Desired.GetNode(), time.Now())
	lp.landedMu.Lock()
	lp.landed = append(lp.landed, rollout.Written{Node: w.Desired.GetNode(), Fingerprint: w.Desired.GetFingerprint()})
	lp.landedMu.Unlock()
	select {
	case lp.landedSig <- struct{}{}:
	default:
	}
}

// writable checks a desired-config write against the rule every reader
// applies (wellformed.DesiredConfig) before it is queued: defence in depth,
// since a value Decide built from something unreadable would be refused by
// the agent and leave the node waiting for a config that never comes. A
// desired config that fails is not written, with an error event naming the
// node (the node's deadlines then run as for any write that never lands); a
// backup that fails is left out, and the backup key keeps what it holds.
func (lp *loop) writable(w *rollout.WriteDesired) bool {
	node := w.Desired.GetNode()
	refuse := func(what string, err error) {
		reason := fmt.Sprintf("refused to write %s of node %s: %v", what, node, err)
		lp.log.Error().Str(logging.FieldNode, node).Str(logging.FieldReason, reason).Msg("desired-config write refused")
		lp.emit(&sluicev1.Event{Kind: contract.KindNode, Id: node, Node: node, Type: "DesiredWriteRefused",
			Rollout: w.Desired.GetRollout(), Revision: w.Desired.GetRevision(), Reason: reason})
	}
	if err := wellformed.DesiredConfig(node, w.Desired); err != nil || node == "" {
		if err == nil {
			err = errors.New("it names no node")
		}
		refuse("the desired config", err)
		return false
	}
	if w.Backup != nil {
		if err := wellformed.DesiredConfig(node, w.Backup); err != nil {
			refuse("the backup", fmt.Errorf("%w; the desired config is written without it", err))
			w.Backup = nil
		}
	}
	return true
}

// writeNow writes one desired config and emits its events once it landed.
func (lp *loop) writeNow(ctx context.Context, w rollout.WriteDesired) error {
	if err := lp.fx.writeDesired(ctx, w.Desired, w.Backup); err != nil {
		return err
	}
	lp.noteLanded(w)
	for _, e := range w.Events {
		lp.emit(e)
	}
	return nil
}

// flush writes rollout progress held back by the save interval.
func (lp *loop) flush(ctx context.Context) error {
	if lp.unsaved == nil {
		return nil
	}
	r := lp.unsaved
	lp.unsaved = nil
	return lp.fx.saveRollout(ctx, r)
}

// writer writes desired configs, each with its backup, and emits their
// events once they landed. Control-plane errors are retried with backoff:
// they never count against a node. Being deposed ends the term.
func (lp *loop) writer(ctx context.Context, q <-chan rollout.WriteDesired) {
	defer lp.writersWG.Done()
	for job := range q {
		lp.writeJob(ctx, job)
		lp.writingNode(job.Desired.GetNode(), -1)
	}
}

// writingNode adds delta to node's count of desired-config writes queued
// or being written, and to the count of all of them (pending).
func (lp *loop) writingNode(node string, delta int) {
	lp.pending.Add(int64(delta))
	lp.writingMu.Lock()
	defer lp.writingMu.Unlock()
	if lp.writing == nil {
		lp.writing = map[string]int{}
	}
	if lp.writing[node] += delta; lp.writing[node] <= 0 {
		delete(lp.writing, node)
	}
}

// forgetConfigs forgets the revisions of node's desired and backup keys,
// deleted: the next write of each reads its revision first.
func (lp *loop) forgetConfigs(node string) {
	lp.kv.forget(contract.BucketNodeConfigs, contract.DesiredKey(node))
	lp.kv.forget(contract.BucketNodeConfigs, contract.BackupKey(node))
}

// busyWriting says whether a desired-config write of node is queued or
// being written.
func (lp *loop) busyWriting(node string) bool {
	lp.writingMu.Lock()
	defer lp.writingMu.Unlock()
	return lp.writing[node] > 0
}

// writeJob writes one desired config until it lands, the term ends or it
// was deposed.
func (lp *loop) writeJob(ctx context.Context, job rollout.WriteDesired) {
	retry := backoff.New(writeRetry)
	for {
		err := lp.writeNow(ctx, job)
		if err == nil || ctx.Err() != nil {
			return
		}
		if errors.Is(err, errDeposed) || lp.term.check(lp.cfg.Now()) != nil {
			select {
			case lp.writeFails <- err:
			default:
			}
			return
		}
		wait := retry.Next()
		lp.log.Warn().Err(err).Str(logging.FieldNode, job.Desired.GetNode()).Dur("retry_in", wait).Msg("write desired config: retrying")
		if backoff.Sleep(ctx, wait, nil) != nil {
			return
		}
	}
}

// writeRetry: 50 ms to 5 s: a write that failed under load is sent less and less often; the node's deadlines start when it lands.
var writeRetry = backoff.Policy{Base: 50 * time.Millisecond, Cap: 5 * time.Second}
