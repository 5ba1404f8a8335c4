package coordinator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/gate"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// loop is one leadership term: it reads the owned state, then turns watched
// changes into events for rollout.Decide and performs the actions it
// returns, in order. It never decides anything itself.
type loop struct {
	cfg  Config
	log  zerolog.Logger
	em   *events.Emitter
	term *term
	fx   effects
	kv   *kvEffects // fx, when it writes to KV: the load seeds its revisions

	revisions   *store.Store[*sluicev1.Revision]
	heads       *store.Store[*sluicev1.Head]
	nodeconfigs *store.Store[*sluicev1.DesiredConfig]
	status      *store.Store[*sluicev1.NodeStatus]
	nodes       *store.Store[*sluicev1.NodePresence]
	rollouts    *store.Store[*sluicev1.Rollout]
	invalid     *store.Store[*sluicev1.InvalidFingerprint]
	refs        *store.Store[*sluicev1.RolloutRef]
	aborts      *store.Store[*sluicev1.AbortRequest]   // control/abort.<rollout>, written by operators
	forgives    *store.Store[*sluicev1.ForgiveRequest] // control/forgive.<fingerprint>, written by operators
	pauses      *store.Store[*sluicev1.PauseRequest]   // control/pause and pause.<rollout>, written by operators
	freezes     *store.Store[*sluicev1.Freeze]         // control/freeze.<id>, written by operators
	confirms    *store.Store[*sluicev1.StoreConfirm]   // control/store.confirm, written by operators
	set         *buckets.Set                           // whether the store is lost (storeloss.go)

	// acked announces the control-plane pause generation this leader
	// reached (its instance presence); nil in tests without one.
	acked func(*sluicev1.PauseAck)

	st         *rollout.State
	unsaved    *sluicev1.Rollout           // progress not yet written
	writes     []chan rollout.WriteDesired // one queue per writer; a node always goes to the same one, in order
	writersWG  sync.WaitGroup
	writeFails chan error

	// Desired-config writes that landed, for Written events: writers add
	// to landed and signal landedSig; the loop takes them in its own turn
	// (a writer never blocks on the loop, which may be blocked on it).
	landedMu  sync.Mutex
	landed    []rollout.Written
	landedSig chan struct{}
	// keys holds per node when its last write landed (for verify), the
	// newest status revision seen (so that a status read again,
	// rollout.ReadStatuses, never hands decide an older one than the watch
	// did) and, for the effects, its nodeconfigs revisions.
	keys fleetKeys
	// answers are the events the reads of the step being performed
	// answered with (rollout.ReadStatuses, rollout.ReadDesired), decided
	// once every action of the step was performed.
	answers []rollout.Event

	loaded  atomic.Bool  // the term's state is loaded and its first step done
	pending atomic.Int64 // desired-config writes queued or being written
	// writing counts each node's desired-config writes queued or being
	// written, so that a returning node's key is read only when none is.
	writingMu sync.Mutex
	writing   map[string]int
	// desiredLast reads a nodeconfigs key's last message from the stream's
	// leader (store.Batcher.Last): whether a desired config is really gone.
	desiredLast func(ctx context.Context, key string) (rev uint64, live bool, err error)

	reconnected <-chan nats.Status // the connection came back: reload
	quarantine  *events.Quarantine // reports values refused at intake, once per revision
	emit        func(*sluicev1.Event)
	gates       *gateRunner // measures the gates Decide asks for (WatchGates)
}

// errReconnected ends a term after the NATS connection came back.
var errReconnected = errors.New("reconnected to NATS: reloading state")

func newLoop(b *buckets.Set, cfg Config, log zerolog.Logger, em *events.Emitter, t *term) *loop {
	lp := &loop{
		cfg: cfg, log: log, em: em, term: t,
		revisions:   store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }),
		heads:       store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }),
		nodeconfigs: store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }),
		status:      store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
		nodes:       store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }),
		rollouts:    store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }),
		invalid:     store.New(b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }),
		refs:        store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }),
		aborts:      store.New(b.Control, func() *sluicev1.AbortRequest { return &sluicev1.AbortRequest{} }),
		forgives:    store.New(b.Control, func() *sluicev1.ForgiveRequest { return &sluicev1.ForgiveRequest{} }),
		pauses:      store.New(b.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} }),
		freezes:     store.New(b.Control, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }),
		confirms:    store.New(b.Control, func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} }),
		set:         b,
		st:          rollout.NewState(),
		writeFails:  make(chan error, 1),
		landedSig:   make(chan struct{}, 1),
	}
	lp.kv = &kvEffects{term: t, now: cfg.Now, before: cfg.BeforeWrite, nodeconfigs: lp.nodeconfigs,
		rollouts: lp.rollouts, refs: lp.refs, invalid: lp.invalid, revs: map[string]uint64{}, keys: &lp.keys, listed: map[string]bool{},
		retention: cfg.Retention, log: log, emit: em.Emit}
	lp.fx = lp.kv
	lp.emit = em.Emit
	lp.quarantine = events.NewQuarantine(em)
	lp.desiredLast = t.batchers[contract.BucketNodeConfigs].Last
	lp.gates = newGateRunner(gate.Client{HTTP: cfg.GateHTTP}, cfg.GateTimeout, cfg.Now, log)
	return lp
}

func (lp *loop) run(ctx context.Context) error {
	// Watch first, so that nothing written after the initial read is missed.
	w, err := lp.watch(ctx)
	if err != nil {
		return err
	}
	loaded, err := lp.load(ctx, w)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}

	for range lp.cfg.Writers {
		q := make(chan rollout.WriteDesired, 64)
		lp.writes = append(lp.writes, q)
		lp.writersWG.Add(1)
		go lp.writer(ctx, q)
	}
	defer func() {
		for _, q := range lp.writes {
			close(q)
		}
		lp.writersWG.Wait()
	}()

	defer lp.gates.stop()
	if err := lp.step(ctx, loaded); err != nil {
		return err
	}
	lp.loaded.Store(true)
	save := time.NewTicker(lp.cfg.SaveInterval)
	defer save.Stop()
	tick := time.NewTicker(lp.cfg.TickInterval)
	defer tick.Stop()
	verify := time.NewTicker(lp.cfg.VerifyInterval)
	defer verify.Stop()
	listed := make(chan desiredKeys, 1)
	listing := false
	for {
		var (
			ev  rollout.Event
			err error
		)
		select {
		case <-ctx.Done():
			lp.flush(context.Background())
			return ctx.Err()
		case err := <-lp.writeFails:
			return err
		case <-lp.reconnected:
			lp.flush(context.Background())
			return errReconnected
		case <-save.C:
			if err := lp.flush(ctx); err != nil {
				return err
			}
			continue
		case <-tick.C:
			ev = rollout.Tick{Recheck: true}
		case <-verify.C:
			if !listing {
				listing = true
				go func() { listed <- lp.listDesired(ctx) }()
			}
			continue
		case keys := <-listed:
			listing = false
			ev = lp.listedEvent(keys)
		case <-lp.landedSig:
			if err := lp.stepLanded(ctx); err != nil {
				return err
			}
			continue
		case m := <-lp.gates.out:
			ev = m
		case e, ok := <-w.head:
			if ev, err = lp.headEvent(ctx, e, ok); err != nil {
				return err
			}
		case e, ok := <-w.abort:
			ev, err = request(lp, e, ok, contract.AbortKey(""), func(id string, r *sluicev1.AbortRequest) rollout.Event {
				r.Rollout = id
				return rollout.AbortRequested{R: r}
			})
		case e, ok := <-w.forgive:
			ev, err = request(lp, e, ok, contract.ForgiveKey(""), func(fp string, r *sluicev1.ForgiveRequest) rollout.Event {
				r.Fingerprint = fp
				return rollout.ForgiveRequested{R: r}
			})
		case e, ok := <-w.pause:
			ev, err = lp.pauseEvent(e, ok)
		case e, ok := <-w.rolloutPause:
			ev, err = request(lp, e, ok, contract.RolloutPauseKey(""), func(id string, r *sluicev1.PauseRequest) rollout.Event {
				r.Rollout = id
				return rollout.RolloutPauseChanged{R: r}
			})
		case e, ok := <-w.freeze:
			ev, err = freezeEvent(lp, e, ok)
		case e, ok := <-w.storeConfirm:
			ev, err = lp.storeConfirmEvent(ctx, e, ok)
		case e, ok := <-w.nodes:
			ev, err = lp.presenceEvent(e, ok)
		case e, ok := <-w.status:
			ev, err = lp.statusEvent(e, ok)
		}
		if err != nil {
			return err
		}
		if ev == nil {
			continue // nothing for the decider: a deletion, or a value reported at intake
		}
		if err := lp.step(ctx, ev); err != nil {
			return err
		}
	}
}

// step runs Decide and performs its actions in order. Without a writer
// pool the writes landed during the step are taken at once.
func (lp *loop) step(ctx context.Context, ev rollout.Event) error {
	if err := lp.decide(ctx, ev); err != nil {
		return err
	}
	if len(lp.writes) == 0 {
		return lp.stepLanded(ctx)
	}
	return nil
}

// decide runs Decide on ev and performs its actions in order; the answers
// of the reads among them are decided next, once every action of the step
// was performed (a later action may carry what an earlier answer would
// change: the answer never comes between).
func (lp *loop) decide(ctx context.Context, ev rollout.Event) error {
	queue := []rollout.Event{ev}
	for len(queue) > 0 {
		ev := queue[0]
		queue = queue[1:]
		for _, a := range rollout.Decide(lp.st, ev, lp.cfg.Now()) {
			if err := lp.perform(ctx, a); err != nil {
				lp.answers = nil
				return err
			}
		}
		queue = append(queue, lp.answers...)
		lp.answers = nil
	}
	return nil
}

// answer keeps a read's answer for decide; nil is none.
func (lp *loop) answer(ev rollout.Event) {
	if ev != nil {
		lp.answers = append(lp.answers, ev)
	}
}

// stepLanded feeds every landed write to Decide as a Written event.
func (lp *loop) stepLanded(ctx context.Context) error {
	for {
		lp.landedMu.Lock()
		batch := lp.landed
		lp.landed = nil
		lp.landedMu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		for _, w := range batch {
			if err := lp.decide(ctx, w); err != nil {
				return err
			}
		}
	}
}

// perform performs one action. A read keeps its answer for decide (in
// answers; none when it changes nothing).
func (lp *loop) perform(ctx context.Context, a rollout.Action) error {
	switch a := a.(type) {
	case rollout.ReadStatuses:
		lp.answer(lp.readStatuses(ctx, a))
	case rollout.ReadDesired:
		lp.answer(lp.readDesired(ctx, a))
	case rollout.WriteDesired:
		if !lp.writable(&a) {
			return nil
		}
		if len(lp.writes) == 0 {
			// No writer pool (scenario tests): write now, in order.
			return lp.writeNow(ctx, a)
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(a.Desired.GetNode()))
		lp.writingNode(a.Desired.GetNode(), 1)
		select {
		case lp.writes[h.Sum32()%uint32(len(lp.writes))] <- a:
		case <-ctx.Done():
			lp.writingNode(a.Desired.GetNode(), -1)
			return ctx.Err()
		}
	case rollout.StartRollout:
		lp.unsaved = nil
		lp.cfg.Metrics.rolloutSeen(a.Rollout)
		return lp.fx.startRollout(ctx, a.Rollout)
	case rollout.SaveRollout:
		lp.unsaved = a.Rollout
		lp.cfg.Metrics.rolloutSeen(a.Rollout)
		if a.Flush {
			return lp.flush(ctx)
		}
	case rollout.FinishRollout:
		lp.unsaved = nil
		lp.cfg.Metrics.rolloutSeen(a.Rollout)
		return lp.fx.finishRollout(ctx, a)
	case rollout.RecordInvalid:
		return lp.fx.recordInvalid(ctx, a.Fingerprint)
	case rollout.ForgiveInvalid:
		return lp.fx.forgiveInvalid(ctx, a.Fingerprint)
	case rollout.AckPause:
		if lp.acked != nil {
			lp.acked(a.Ack)
		}
	case rollout.Emit:
		lp.emit(a.Event)
	case rollout.WatchGates:
		lp.gates.set(ctx, a)
	}
	return nil
}
