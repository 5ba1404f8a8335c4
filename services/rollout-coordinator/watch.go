package coordinator

// The term's watches, and each watched value as an event for the decider.

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// request turns a watched operator request into an event, the key naming
// what it is about whatever its value says: nil for a deletion or a value
// that does not decode (quarantined).
func request[T proto.Message](lp *loop, e store.Entry[T], ok bool, prefix string, event func(subject string, v T) rollout.Event) (rollout.Event, error) {
	switch {
	case !ok:
		return nil, errors.New("control watcher stopped")
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketControl, e.Key, e.Revision, e.Err, skipped)
		return nil, nil
	case !e.Value.ProtoReflect().IsValid():
		return nil, nil
	}
	return event(strings.TrimPrefix(e.Key, prefix), e.Value), nil
}

// freezeEvent is a watched freeze key as an event: added or changed (F
// set) or removed (F nil); nil for a value refused at intake (reported,
// and skipped as every control request is).
func freezeEvent(lp *loop, e store.Entry[*sluicev1.Freeze], ok bool) (rollout.Event, error) {
	if !ok {
		return nil, errors.New("control watcher stopped")
	}
	id := strings.TrimPrefix(e.Key, contract.FreezeKey(""))
	switch {
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketControl, e.Key, e.Revision, e.Err, skipped)
		return nil, nil
	case !e.Value.ProtoReflect().IsValid():
		return rollout.FreezeChanged{ID: id}, nil
	}
	e.Value.Id = id
	return rollout.FreezeChanged{ID: id, F: e.Value}, nil
}

// skipped is what the coordinator does with a value refused at intake
// (reported by lp.quarantine, once per revision): the key is skipped and
// everything else carries on.
const skipped = "skipped until it is rewritten"

// watches are a term's watchers. They are opened before the load, whose
// initial values they carry, so that nothing written after the read is
// missed.
type watches struct {
	nodes        <-chan store.Entry[*sluicev1.NodePresence]
	status       <-chan store.Entry[*sluicev1.NodeStatus]
	head         <-chan store.Entry[*sluicev1.Head]
	abort        <-chan store.Entry[*sluicev1.AbortRequest]
	forgive      <-chan store.Entry[*sluicev1.ForgiveRequest]
	pause        <-chan store.Entry[*sluicev1.PauseRequest] // control/pause
	rolloutPause <-chan store.Entry[*sluicev1.PauseRequest] // control/pause.<rollout>
	freeze       <-chan store.Entry[*sluicev1.Freeze]
	storeConfirm <-chan store.Entry[*sluicev1.StoreConfirm] // control/store.confirm
}

// watch opens the term's watches.
func (lp *loop) watch(ctx context.Context) (watches, error) {
	var w watches
	var err error
	open := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	open(func() (err error) { w.nodes, err = lp.nodes.Watch(ctx, ">"); return })
	open(func() (err error) { w.status, err = lp.status.Watch(ctx, ">"); return })
	open(func() (err error) { w.head, err = lp.heads.Watch(ctx, contract.KeyHead); return })
	open(func() (err error) { w.abort, err = lp.aborts.Watch(ctx, contract.AbortKey(">")); return })
	open(func() (err error) { w.forgive, err = lp.forgives.Watch(ctx, contract.ForgiveKey(">")); return })
	open(func() (err error) { w.pause, err = lp.pauses.Watch(ctx, contract.KeyPause); return })
	open(func() (err error) { w.rolloutPause, err = lp.pauses.Watch(ctx, contract.RolloutPauseKey(">")); return })
	open(func() (err error) { w.freeze, err = lp.freezes.Watch(ctx, contract.FreezeKey(">")); return })
	if lp.confirms != nil {
		open(func() (err error) { w.storeConfirm, err = lp.confirms.Watch(ctx, contract.KeyStoreConfirm); return })
	}
	return w, err
}

// headEvent is a watched head as HeadMoved, with the revision it names;
// nil for a head that cannot be rolled out (reported).
func (lp *loop) headEvent(ctx context.Context, e store.Entry[*sluicev1.Head], ok bool) (rollout.Event, error) {
	switch {
	case !ok:
		return nil, errors.New("head watcher stopped")
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketRevisions, e.Key, e.Revision, e.Err, skipped)
		return nil, nil
	case e.Value == nil:
		return nil, nil
	}
	rev, err := lp.revision(ctx, contract.BucketRevisions, contract.KeyHead, e.Value.GetRevision())
	if err != nil || rev == nil {
		return nil, err // nil, nil: reported; this head is not rolled out, the next one is
	}
	if err := lp.freezesNow(ctx); err != nil {
		return nil, err
	}
	lost, err := lp.storeLost(ctx)
	if err != nil {
		return nil, err // the term reloads: an unreadable answer starts nothing
	}
	return rollout.HeadMoved{Head: e.Value, Rev: rev, StoreLost: lost}, nil
}

// freezesNow takes in every freeze stored now, before a head that moved is
// decided: the freezes' watch and the head's have no order between them,
// so a freeze written just before an apply could otherwise arrive after
// its head and not hold the first wave (chaos seed 153). Taking one in
// again is no change; a list that fails leaves it to the watch.
func (lp *loop) freezesNow(ctx context.Context) error {
	if lp.freezes == nil {
		return nil
	}
	fs, err := lp.freezes.List(ctx, contract.FreezeKey(">"))
	if err != nil {
		lp.log.Warn().Err(err).Msg("list freezes before a new head: left to the freezes' watch")
		return nil
	}
	for _, f := range fs {
		if f.Err != nil {
			continue // reported by the watch
		}
		id := strings.TrimPrefix(f.Key, contract.FreezeKey(""))
		f.Value.Id = id
		if err := lp.step(ctx, rollout.FreezeChanged{ID: id, F: f.Value}); err != nil {
			return err
		}
	}
	return nil
}

// pauseEvent is the watched control-plane pause as PauseChanged (R nil
// when the request was deleted).
func (lp *loop) pauseEvent(e store.Entry[*sluicev1.PauseRequest], ok bool) (rollout.Event, error) {
	switch {
	case !ok:
		return nil, errors.New("pause watcher stopped")
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketControl, e.Key, e.Revision, e.Err, skipped)
		return nil, nil
	case e.Key == "":
		return nil, nil
	case e.Deleted:
		return rollout.PauseChanged{}, nil
	}
	return rollout.PauseChanged{R: e.Value}, nil
}

// presenceEvent is a watched presence as Presence (P nil when it lapsed or
// was deleted).
func (lp *loop) presenceEvent(e store.Entry[*sluicev1.NodePresence], ok bool) (rollout.Event, error) {
	switch {
	case !ok:
		return nil, errors.New("nodes watcher stopped")
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketNodes, e.Key, e.Revision, e.Err, skipped)
		return nil, nil
	case e.Value == nil && !e.Deleted:
		return nil, nil
	}
	return rollout.Presence{Node: e.Key, P: e.Value}, nil
}

// statusEvent is a watched status as Status, or Reaped when the reaper
// deleted it.
func (lp *loop) statusEvent(e store.Entry[*sluicev1.NodeStatus], ok bool) (rollout.Event, error) {
	if !ok {
		return nil, errors.New("status watcher stopped")
	}
	if e.Revision > lp.keys.statusRev(e.Key) {
		lp.keys.setStatusRev(e.Key, e.Revision)
	}
	switch {
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketStatus, e.Key, e.Revision, e.Err, skipped)
		return nil, nil
	case e.Deleted:
		lp.forgetConfigs(e.Key)
		lp.cfg.Metrics.nodePhase(e.Key, nil)
		return rollout.Reaped{Node: e.Key}, nil
	case e.Value == nil:
		return nil, nil
	}
	e.Value.Node = e.Key
	lp.cfg.Metrics.nodePhase(e.Key, e.Value)
	return rollout.Status{S: e.Value}, nil
}
