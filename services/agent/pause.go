package agent

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/pause"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// pausing is the agent's side of the control plane's pause
// (docs/operations.md, "Pause"): while paused the worker finishes the
// apply it is in and starts no other — except, under joiners "last-good",
// the first config of a node that has none — and the agent acknowledges
// the pause's generation in its presence once it is idle.
type pausing struct {
	mu  sync.Mutex
	req *sluicev1.PauseRequest // newest seen; nil = never paused
	ack *sluicev1.PauseAck     // what the presence announces
	// busy is what the worker is doing, as busyDoing + describe(busy);
	// nil = idle. It is described only while a pause is requested, the
	// only time the acknowledgement names it: every apply sets it.
	busy      *sluicev1.DesiredConfig
	busyDoing string
	// storeID is the store identity (control/store.id) req's generation
	// counts in; "" when not known (storeid.go, pauseStoreReplaced).
	storeID string
	// goneChecked: control/pause was found absent while req is held, and
	// the store's identity was read for it once (fetchPause).
	goneChecked bool
	wake        chan struct{} // the worker: the request changed (capacity 1)
	kick        chan struct{} // Run's loop: write the presence now (capacity 1)
}

func newPausing() pausing {
	return pausing{wake: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
}

// pauseSeen takes a request read from control/pause or its republished
// copy. A generation below the one held (or the same generation saying
// something else, which one store never writes) is an older request read
// late — unless the store was replaced, whose generations count from 1
// again (pauseStoreReplaced).
func (a *Agent) pauseSeen(r *sluicev1.PauseRequest, from string) {
	p := &a.pz
	p.mu.Lock()
	held := p.req
	older := r.GetGeneration() < held.GetGeneration() ||
		(r.GetGeneration() == held.GetGeneration() && !proto.Equal(r, held))
	if r.GetGeneration() == held.GetGeneration() && !older {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if older && !a.pauseStoreReplaced(held, r, from) {
		return
	}
	p.mu.Lock()
	if p.req != held && r.GetGeneration() <= p.req.GetGeneration() {
		p.mu.Unlock() // another request was taken meanwhile
		return
	}
	p.req, p.goneChecked = proto.Clone(r).(*sluicev1.PauseRequest), false
	p.mu.Unlock()
	a.log.Info().Str(logging.FieldReason, contract.DescribePause(r)).Str("from", from).Msg("control plane pause changed")
	signal(p.wake)
	a.updateAck()
}

// request is the pause request in force.
func (a *Agent) request() *sluicev1.PauseRequest {
	a.pz.mu.Lock()
	defer a.pz.mu.Unlock()
	return a.pz.req
}

// held reports whether the worker must not start what the mailbox holds.
// Only the worker calls it (it reads the worker's state).
func (a *Agent) held() bool {
	r := a.request()
	if !r.GetPaused() {
		return false
	}
	joiner := a.worker.lastGood == nil && a.worker.applied == ""
	return !(joiner && contract.JoinersGetLastGood(r))
}

// claim marks the worker busy with doing + describe(d) unless the pause
// holds it, and reports whether it may start. The mark comes before the
// look at the pause: a pause seen from then on waits for what the worker
// starts (its acknowledgement names it), and one seen before holds it.
// Looking first left a gap: a pause seen between the look and the mark
// was acknowledged at once (the worker was still idle), and the worker
// then started an operation under a pause it had acknowledged (chaos seed
// 66). When it may not start, the worker is idle again. Only the worker
// calls it.
func (a *Agent) claim(doing string, d *sluicev1.DesiredConfig) bool {
	a.setBusy(doing, d)
	if !a.held() {
		return true
	}
	a.setBusy("", nil)
	return false
}

// setBusy records that the worker is doing doing + describe(d), or that
// it is idle (d nil), and moves the acknowledgement.
func (a *Agent) setBusy(doing string, d *sluicev1.DesiredConfig) {
	a.pz.mu.Lock()
	a.pz.busy, a.pz.busyDoing = d, doing
	a.pz.mu.Unlock()
	a.updateAck()
}

// busyText is what the worker is doing, for the acknowledgement of a
// pause; "" = idle. The caller holds p.mu.
func (p *pausing) busyText() string {
	if p.busy == nil {
		return ""
	}
	return p.busyDoing + describe(p.busy)
}

// updateAck recomputes the acknowledgement; a change is written to the
// presence at once and, when a generation is reached, logged and evented.
func (a *Agent) updateAck() {
	p := &a.pz
	p.mu.Lock()
	prev := p.ack
	busy := ""
	if p.req.GetPaused() { // NextAck reads what the worker does only then
		busy = p.busyText()
	}
	next := contract.NextAck(prev, p.req, busy, a.cfg.Now())
	p.ack = next
	p.mu.Unlock()
	if next == prev {
		return
	}
	signal(p.kick)
	pause.Announce(a.log, a.em.Emit, Component, a.cfg.Node, prev, next)
}

// currentAck is the acknowledgement for the presence.
func (a *Agent) currentAck() *sluicev1.PauseAck {
	a.pz.mu.Lock()
	defer a.pz.mu.Unlock()
	if a.pz.ack == nil {
		return nil
	}
	return proto.Clone(a.pz.ack).(*sluicev1.PauseAck)
}

// receivePause handles control/pause republished on contract.SubjectPause.
func (a *Agent) receivePause(m *nats.Msg) {
	if op := m.Header.Get(kvOperationHeader); op == "DEL" || op == "PURGE" {
		a.log.Warn().Str("operation", op).Msg("control/pause was deleted; the last pause request seen stays in force until a newer one")
		return
	}
	r := &sluicev1.PauseRequest{}
	// Checked as a Get is (store.Decode): a value of another type is unreadable.
	if err := store.Decode(contract.BucketControl, contract.KeyPause, m.Data, r); err != nil {
		rev, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		a.unreadablePause(rev, err, "republished write")
		return
	}
	a.pauseSeen(r, "republished write")
}

// fetchPause reads control/pause with a Get, in case a republished write
// was missed (before start, or while disconnected).
func (a *Agent) fetchPause(ctx context.Context, why string) {
	e, err := a.pauses.Get(ctx, contract.KeyPause)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.pauseGone(why)
	case errors.Is(err, store.ErrUndecodable):
		// Not retried soon: it would read the same bytes, from every agent
		// of the fleet every second. The next write or resync brings another.
		a.unreadablePause(e.Revision, err, why)
	case err != nil:
		if ctx.Err() == nil {
			a.log.Warn().Err(err).Str(logging.FieldReason, why).Msg("read control/pause; retrying shortly")
			a.resyncSoon(ctx)
		}
	default:
		a.pauseSeen(e.Value, why)
	}
}

// unreadablePause reports, once per stored revision (the agent's
// quarantine), a control/pause refused at intake. The pause request in
// force stays until a readable one is written.
func (a *Agent) unreadablePause(rev uint64, why error, from string) {
	if !a.quarantine.Report(contract.BucketControl, contract.KeyPause, rev, why,
		"ignored: the pause request in force stays until a readable one is written") {
		a.log.Debug().Uint64("kv_revision", rev).Str("from", from).Msg("unreadable pause request read again; still ignored")
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
