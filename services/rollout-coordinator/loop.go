package coordinator

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/contract/wellformed"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
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
	landedAt  map[string]time.Time // when each node's last write landed (for verify)
	landedSig chan struct{}
	// statusRev is the newest status revision seen per node, so that a
	// status read again (recheckOverdue) never hands decide an older one
	// than the watch did.
	statusRev map[string]uint64

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

func newLoop(b *contract.Buckets, cfg Config, log zerolog.Logger, em *events.Emitter, t *term) *loop {
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
		st:          rollout.NewState(),
		writeFails:  make(chan error, 1),
		landedSig:   make(chan struct{}, 1),
		statusRev:   map[string]uint64{},
	}
	lp.kv = &kvEffects{term: t, now: cfg.Now, before: cfg.BeforeWrite, nodeconfigs: lp.nodeconfigs,
		rollouts: lp.rollouts, refs: lp.refs, invalid: lp.invalid, revs: map[string]uint64{}, listed: map[string]bool{},
		retention: cfg.Retention, log: log, emit: em.Emit}
	lp.fx = lp.kv
	lp.emit = em.Emit
	lp.quarantine = events.NewQuarantine(em)
	lp.desiredLast = t.batchers[contract.BucketNodeConfigs].Last
	lp.gates = newGateRunner(cfg.GateTimeout, cfg.Now, log)
	return lp
}

func (lp *loop) run(ctx context.Context) error {
	// Watch first, so that nothing written after the initial read is missed.
	nodesW, err := lp.nodes.Watch(ctx, ">")
	if err != nil {
		return err
	}
	statusW, err := lp.status.Watch(ctx, ">")
	if err != nil {
		return err
	}
	headW, err := lp.heads.Watch(ctx, contract.KeyHead)
	if err != nil {
		return err
	}
	abortW, err := lp.aborts.Watch(ctx, contract.AbortKey(">"))
	if err != nil {
		return err
	}
	forgiveW, err := lp.forgives.Watch(ctx, contract.ForgiveKey(">"))
	if err != nil {
		return err
	}
	pauseW, err := lp.pauses.Watch(ctx, contract.KeyPause)
	if err != nil {
		return err
	}
	rolloutPauseW, err := lp.pauses.Watch(ctx, contract.RolloutPauseKey(">"))
	if err != nil {
		return err
	}
	freezeW, err := lp.freezes.Watch(ctx, contract.FreezeKey(">"))
	if err != nil {
		return err
	}
	loaded, err := lp.load(ctx, nodesW, statusW, headW)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	// A request's key names what it is about, whatever its value says.
	for e := range initial(ctx, lp, contract.BucketControl, abortW) {
		e.Value.Rollout = strings.TrimPrefix(e.Key, contract.AbortKey(""))
		loaded.Aborts = append(loaded.Aborts, e.Value)
	}
	for e := range initial(ctx, lp, contract.BucketControl, forgiveW) {
		e.Value.Fingerprint = strings.TrimPrefix(e.Key, contract.ForgiveKey(""))
		loaded.Forgives = append(loaded.Forgives, e.Value)
	}
	pauseUnreadable := false
	for e := range initialWith(ctx, lp, contract.BucketControl, pauseW, func(store.Entry[*sluicev1.PauseRequest]) { pauseUnreadable = true }) {
		loaded.Pause = e.Value
	}
	if pauseUnreadable && loaded.Pause == nil {
		// Whether the operators paused the control plane is unknown: a new
		// term holds as if they had, until a readable request is written
		// (sluice pause or resume). Generation 0 acknowledges no request.
		loaded.Pause = &sluicev1.PauseRequest{Paused: true, Joiners: contract.JoinersFreeze,
			Reason: contract.BucketControl + "/" + contract.KeyPause + " is unreadable: held as paused until a readable request is written (sluice pause or sluice resume)"}
	}
	for e := range initial(ctx, lp, contract.BucketControl, freezeW) {
		e.Value.Id = strings.TrimPrefix(e.Key, contract.FreezeKey(""))
		loaded.Freezes = append(loaded.Freezes, e.Value)
	}
	for e := range initial(ctx, lp, contract.BucketControl, rolloutPauseW) {
		e.Value.Rollout = strings.TrimPrefix(e.Key, contract.RolloutPauseKey(""))
		loaded.RolloutPauses = append(loaded.RolloutPauses, e.Value)
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
		var ev rollout.Event
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
			if err := lp.recheckOverdue(ctx); err != nil {
				return err
			}
			ev = rollout.Tick{}
		case <-verify.C:
			if !listing {
				listing = true
				go func() { listed <- lp.listDesired(ctx) }()
			}
			continue
		case keys := <-listed:
			listing = false
			if err := lp.verify(ctx, keys); err != nil {
				return err
			}
			continue
		case <-lp.landedSig:
			if err := lp.stepLanded(ctx); err != nil {
				return err
			}
			continue
		case m := <-lp.gates.out:
			ev = m
		case e, ok := <-headW:
			if !ok {
				return errors.New("head watcher stopped")
			}
			if e.Err != nil {
				lp.quarantine.Report(contract.BucketRevisions, e.Key, e.Revision, e.Err, skipped)
				continue
			}
			if e.Value == nil {
				continue
			}
			rev, err := lp.revision(ctx, contract.BucketRevisions, contract.KeyHead, e.Value.GetRevision())
			if err != nil {
				return err
			}
			if rev == nil {
				continue // reported: this head is not rolled out; the next one is
			}
			ev = rollout.HeadMoved{Head: e.Value, Rev: rev}
		case e, ok := <-abortW:
			ev, err = request(lp, e, ok, contract.AbortKey(""), func(id string, r *sluicev1.AbortRequest) rollout.Event {
				r.Rollout = id
				return rollout.AbortRequested{R: r}
			})
			if err != nil {
				return err
			}
			if ev == nil {
				continue
			}
		case e, ok := <-forgiveW:
			ev, err = request(lp, e, ok, contract.ForgiveKey(""), func(fp string, r *sluicev1.ForgiveRequest) rollout.Event {
				r.Fingerprint = fp
				return rollout.ForgiveRequested{R: r}
			})
			if err != nil {
				return err
			}
			if ev == nil {
				continue
			}
		case e, ok := <-pauseW:
			switch {
			case !ok:
				return errors.New("pause watcher stopped")
			case e.Err != nil:
				lp.quarantine.Report(contract.BucketControl, e.Key, e.Revision, e.Err, skipped)
				continue
			case e.Key == "":
				continue
			case e.Deleted:
				ev = rollout.PauseChanged{}
			default:
				ev = rollout.PauseChanged{R: e.Value}
			}
		case e, ok := <-rolloutPauseW:
			ev, err = request(lp, e, ok, contract.RolloutPauseKey(""), func(id string, r *sluicev1.PauseRequest) rollout.Event {
				r.Rollout = id
				return rollout.RolloutPauseChanged{R: r}
			})
			if err != nil {
				return err
			}
			if ev == nil {
				continue
			}
		case e, ok := <-freezeW:
			if ev, ok = freezeEvent(lp, e, ok); !ok {
				return errors.New("control watcher stopped")
			}
			if ev == nil {
				continue
			}
		case e, ok := <-nodesW:
			if !ok {
				return errors.New("nodes watcher stopped")
			}
			if e.Err != nil {
				lp.quarantine.Report(contract.BucketNodes, e.Key, e.Revision, e.Err, skipped)
				continue
			}
			if e.Value == nil && !e.Deleted {
				continue
			}
			if !e.Deleted {
				if err := lp.returning(ctx, e.Key, e.Value); err != nil {
					return err
				}
			}
			ev = rollout.Presence{Node: e.Key, P: e.Value}
		case e, ok := <-statusW:
			if !ok {
				return errors.New("status watcher stopped")
			}
			if e.Revision > lp.statusRev[e.Key] {
				lp.seenStatus(e.Key, e.Revision)
			}
			switch {
			case e.Err != nil:
				lp.quarantine.Report(contract.BucketStatus, e.Key, e.Revision, e.Err, skipped)
				continue
			case e.Deleted:
				lp.forgetConfigs(e.Key)
				lp.cfg.Metrics.nodePhase(e.Key, nil)
				ev = rollout.Reaped{Node: e.Key}
			case e.Value == nil:
				continue
			default:
				e.Value.Node = e.Key
				lp.cfg.Metrics.nodePhase(e.Key, e.Value)
				ev = rollout.Status{S: e.Value}
			}
		}
		if err := lp.step(ctx, ev); err != nil {
			return err
		}
	}
}

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
// and skipped as every control request is). ok is false when the watcher
// stopped.
func freezeEvent(lp *loop, e store.Entry[*sluicev1.Freeze], open bool) (ev rollout.Event, ok bool) {
	if !open {
		return nil, false
	}
	id := strings.TrimPrefix(e.Key, contract.FreezeKey(""))
	switch {
	case e.Err != nil:
		lp.quarantine.Report(contract.BucketControl, e.Key, e.Revision, e.Err, skipped)
		return nil, true
	case !e.Value.ProtoReflect().IsValid():
		return rollout.FreezeChanged{ID: id}, true
	}
	e.Value.Id = id
	return rollout.FreezeChanged{ID: id, F: e.Value}, true
}

// skipped is what the coordinator does with a value refused at intake
// (reported by lp.quarantine, once per revision): the key is skipped and
// everything else carries on.
const skipped = "skipped until it is rewritten"

// load reads everything the coordinator owns or depends on. Presence, status
// and head come from the watchers' initial values, so the live changes that
// follow continue exactly where the read ended.
func (lp *loop) load(ctx context.Context, nodesW <-chan store.Entry[*sluicev1.NodePresence],
	statusW <-chan store.Entry[*sluicev1.NodeStatus], headW <-chan store.Entry[*sluicev1.Head]) (rollout.Loaded, error) {
	// The nodes' values are taken in one by one as they are read
	// (rollout.Intake): holding every decoded value of the fleet until
	// Decide took them was most of the coordinator's peak heap.
	ev := rollout.Loaded{Term: lp.term.epoch, InvalidExpiry: lp.cfg.InvalidExpiry, Intake: rollout.NewIntake()}
	presences, statuses := 0, 0
	// The store bound every value to its key (a presence or status naming
	// another node — what a compromised agent would write to act as
	// another — is unreadable: pkg/contract/wellformed).
	for e := range initial(ctx, lp, contract.BucketNodes, nodesW) {
		e.Value.Node = e.Key
		ev.Intake.Presence(e.Value)
		presences++
	}
	for e := range initial(ctx, lp, contract.BucketStatus, statusW) {
		e.Value.Node = e.Key
		ev.Intake.Status(e.Value)
		statuses++
		lp.cfg.Metrics.nodePhase(e.Key, e.Value)
	}
	for e := range initial(ctx, lp, contract.BucketRevisions, headW) {
		ev.Head = e.Value
	}
	if ctx.Err() != nil {
		return ev, ctx.Err()
	}
	var err error
	if ev.Head != nil {
		if ev.HeadRev, err = lp.revision(ctx, contract.BucketRevisions, contract.KeyHead, ev.Head.GetRevision()); err != nil {
			return ev, err
		}
		id := contract.RolloutID(ev.Head.GetGeneration(), ev.Head.GetRevision())
		r, err := lp.rollouts.Get(ctx, id)
		switch {
		case err == nil:
			ev.HeadRollout = r.Value
			lp.kv.setRev(contract.BucketRollouts, id, r.Revision)
		case errors.Is(err, store.ErrUndecodable):
			// Its record exists: the head's rollout was started. Never run it again.
			lp.quarantine.Report(contract.BucketRollouts, id, r.Revision, err, "the head's rollout is taken as ended (aborted): it was started and is never run again")
			ev.HeadRollout = &sluicev1.Rollout{Id: id, Generation: ev.Head.GetGeneration(), Revision: ev.Head.GetRevision(),
				Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED}
		case !errors.Is(err, store.ErrNotFound):
			return ev, err
		}
	}
	if ref, err := lp.refs.Get(ctx, contract.KeyLastApplied); err == nil {
		lp.kv.setRev(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision)
		ev.LastApplied = ref.Value
		if ev.LastAppliedRev, err = lp.revision(ctx, contract.BucketRollouts, contract.KeyLastApplied, ref.Value.GetRevision()); err != nil {
			return ev, err
		}
	} else if errors.Is(err, store.ErrUndecodable) {
		lp.quarantine.Report(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision, err, "no rollout is taken as the last applied")
		lp.kv.setRev(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision)
	} else if !errors.Is(err, store.ErrNotFound) {
		return ev, err
	}
	if ref, err := lp.refs.Get(ctx, contract.KeyActive); err == nil {
		lp.kv.setRev(contract.BucketRollouts, contract.KeyActive, ref.Revision)
		r, err := lp.rollouts.Get(ctx, ref.Value.GetRollout())
		switch {
		case err == nil:
			lp.kv.setRev(contract.BucketRollouts, r.Key, r.Revision)
			ev.Active = r.Value
			if ev.ActiveRev, err = lp.revision(ctx, contract.BucketRollouts, r.Key, r.Value.GetRevision()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return ev, err
			}
		case errors.Is(err, store.ErrUndecodable), errors.Is(err, store.ErrNotFound):
			// Its record cannot be read: the decider stops the rollout and
			// reverts what it touched (rollout.LostRollout); the terminal
			// record is written over the unreadable one.
			const stopped = "the rollout is stopped, the nodes it touched are reverted, and its record is written again"
			why := err
			if errors.Is(err, store.ErrNotFound) {
				why = fmt.Errorf("rollouts/active names rollout %s, which is not stored", ref.Value.GetRollout())
				lp.quarantine.Report(contract.BucketRollouts, contract.KeyActive, ref.Revision, why, stopped)
			} else {
				lp.kv.setRev(contract.BucketRollouts, r.Key, r.Revision)
				lp.quarantine.Report(contract.BucketRollouts, ref.Value.GetRollout(), r.Revision, err, stopped)
			}
			ev.ActiveLost = &rollout.LostRollout{Ref: ref.Value, Why: strings.TrimPrefix(why.Error(), "get ")}
			if ev.ActiveRev, err = lp.revision(ctx, contract.BucketRollouts, contract.KeyActive, ref.Value.GetRevision()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return ev, err
			}
		default:
			return ev, fmt.Errorf("active rollout: %w", err)
		}
	} else if errors.Is(err, store.ErrUndecodable) {
		lp.quarantine.Report(contract.BucketRollouts, contract.KeyActive, ref.Revision, err, "no rollout is taken as active")
		lp.kv.setRev(contract.BucketRollouts, contract.KeyActive, ref.Revision)
	} else if !errors.Is(err, store.ErrNotFound) {
		return ev, err
	}
	// Delete markers too: then every key's last revision is known, and a key
	// the listing did not show has never existed (no read before its first write).
	configs, err := lp.nodeconfigs.ListWithDeleted(ctx, ">")
	if err != nil {
		return ev, err
	}
	for i, c := range configs {
		configs[i] = store.Entry[*sluicev1.DesiredConfig]{} // taken in below: the listing need not keep it
		lp.kv.setRev(contract.BucketNodeConfigs, c.Key, c.Revision)
		if contract.IsControlKey(c.Key) || c.Deleted {
			continue
		}
		if c.Err != nil {
			if _, which, _ := contract.NodeOfConfigKey(c.Key); which == "backup" {
				// Treated as no backup: a revert of the node takes the last
				// applied revision's config for it, as after a reap.
				lp.quarantine.Report(contract.BucketNodeConfigs, c.Key, c.Revision, c.Err,
					"the node is treated as having no backup, and a revert gives it the last applied revision's config")
				continue
			}
			lp.quarantine.Report(contract.BucketNodeConfigs, c.Key, c.Revision, c.Err, skipped)
			continue
		}
		switch node, which, _ := contract.NodeOfConfigKey(c.Key); which {
		case "desired":
			c.Value.Node = node
			ev.Intake.Desired(c.Value)
		case "backup":
			c.Value.Node = node
			ev.Intake.Backup(c.Value)
		}
	}
	lp.kv.listed[contract.BucketNodeConfigs] = true
	bad, err := lp.invalid.List(ctx, ">")
	if err != nil {
		return ev, err
	}
	for _, f := range bad {
		if contract.IsControlKey(f.Key) {
			continue
		}
		lp.kv.setRev(contract.BucketFingerprints, f.Key, f.Revision)
		if f.Err != nil {
			lp.quarantine.Report(contract.BucketFingerprints, f.Key, f.Revision, f.Err, skipped)
			continue
		}
		f.Value.Fingerprint = f.Key
		ev.Invalid = append(ev.Invalid, f.Value)
	}
	// The rollout the metrics show: the active one, else the head's.
	if ev.Active.GetRevision() != "" {
		lp.cfg.Metrics.rolloutSeen(ev.Active)
	} else {
		lp.cfg.Metrics.rolloutSeen(ev.HeadRollout)
	}
	lp.log.Info().Int("nodes", presences).Int("statuses", statuses).Uint64("term", lp.term.epoch).
		Str(logging.FieldRevision, ev.Head.GetRevision()).Str(logging.FieldRollout, ev.Active.GetId()).
		Msg("leading: state loaded")
	return ev, nil
}

// initial yields a watcher's initial values, up to its caught-up marker;
// values that do not decode are quarantined.
func initial[T proto.Message](ctx context.Context, lp *loop, bucket string, w <-chan store.Entry[T]) func(func(store.Entry[T]) bool) {
	return initialWith(ctx, lp, bucket, w, nil)
}

// initialWith is initial that also hands each quarantined entry to
// unreadable (nil: none).
func initialWith[T proto.Message](ctx context.Context, lp *loop, bucket string, w <-chan store.Entry[T],
	unreadable func(store.Entry[T])) func(func(store.Entry[T]) bool) {
	return func(yield func(store.Entry[T]) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w:
				if !ok || e.Key == "" {
					return
				}
				if e.Err != nil {
					lp.quarantine.Report(bucket, e.Key, e.Revision, e.Err, skipped)
					if unreadable != nil {
						unreadable(e)
					}
					continue
				}
				if e.Deleted {
					continue
				}
				if !yield(e) {
					return
				}
			}
		}
	}
}

// revision reads revision id, named by the value at bucket/key (the store
// checked that value names one). A revision it cannot use — unreadable or
// not well-formed (pkg/contract/wellformed: a value of another type would
// read as an empty Revision, and rolling that out would empty every node) —
// is reported and returned as nil, so that what names it is not rolled out
// and the term carries on instead of ending on every start.
func (lp *loop) revision(ctx context.Context, bucket, key, id string) (*sluicev1.Revision, error) {
	e, err := lp.revisions.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrUndecodable):
		lp.quarantine.Report(contract.BucketRevisions, id, e.Revision, err, "what names it ("+bucket+"/"+key+") is not rolled out")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("revision %s (named by %s/%s): %w", id, bucket, key, err)
	}
	return e.Value, nil
}

// step runs Decide and performs its actions in order. Without a writer
// pool the writes landed during the step are taken at once.
func (lp *loop) step(ctx context.Context, ev rollout.Event) error {
	for _, a := range rollout.Decide(lp.st, ev, lp.cfg.Now()) {
		if err := lp.perform(ctx, a); err != nil {
			return err
		}
	}
	if len(lp.writes) == 0 {
		return lp.stepLanded(ctx)
	}
	return nil
}

// noteLanded records that w's write landed, for a Written event.
func (lp *loop) noteLanded(w rollout.WriteDesired) {
	lp.landedMu.Lock()
	lp.landed = append(lp.landed, rollout.Written{Node: w.Desired.GetNode(), Fingerprint: w.Desired.GetFingerprint()})
	if lp.landedAt == nil {
		lp.landedAt = map[string]time.Time{}
	}
	lp.landedAt[w.Desired.GetNode()] = time.Now()
	lp.landedMu.Unlock()
	select {
	case lp.landedSig <- struct{}{}:
	default:
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
			for _, a := range rollout.Decide(lp.st, w, lp.cfg.Now()) {
				if err := lp.perform(ctx, a); err != nil {
					return err
				}
			}
		}
	}
}

func (lp *loop) perform(ctx context.Context, a rollout.Action) error {
	switch a := a.(type) {
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

// seenStatus records rev as the newest status revision of node key. The
// key is copied: it is cut from a message subject, which the map would
// otherwise keep whole (an assignment stores the key it is given).
func (lp *loop) seenStatus(key string, rev uint64) {
	lp.statusRev[strings.Clone(key)] = rev
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
