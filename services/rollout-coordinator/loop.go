package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// loop is one leadership term: it reads the owned state, then turns watched
// changes into events for decide and performs the actions decide returns.
type loop struct {
	cfg   Config
	log   zerolog.Logger
	em    *events.Emitter
	lease *lease

	revisions   *store.Store[*sluicev1.Revision]
	heads       *store.Store[*sluicev1.Head]
	nodeconfigs *store.Store[*sluicev1.DesiredConfig]
	status      *store.Store[*sluicev1.NodeStatus]
	nodes       *store.Store[*sluicev1.NodePresence]
	rollouts    *store.Store[*sluicev1.Rollout]
	invalid     *store.Store[*sluicev1.InvalidFingerprint]
	refs        *store.Store[*sluicev1.RolloutRef]

	st         *state
	recordRev  map[string]uint64 // rollout id → revision of its record, for CAS
	unsaved    *sluicev1.Rollout // progress not yet written
	writes     chan writeJob
	writersWG  sync.WaitGroup
	writeFails chan error

	reconnected <-chan nats.Status // the connection came back: reload

	revsMu sync.Mutex
	revs   map[string]uint64 // nodeconfigs key → revision last read or written, for CAS without a read
}

// errReconnected ends a term after the NATS connection came back.
var errReconnected = errors.New("reconnected to NATS: reloading state")

// writeJob is one desired config to write and the config it replaces.
type writeJob struct{ desired, previous *sluicev1.DesiredConfig }

func newLoop(b *contract.Buckets, cfg Config, log zerolog.Logger, em *events.Emitter, l *lease) *loop {
	return &loop{
		cfg: cfg, log: log, em: em, lease: l,
		revisions:   store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }),
		heads:       store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }),
		nodeconfigs: store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }),
		status:      store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
		nodes:       store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }),
		rollouts:    store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }),
		invalid:     store.New(b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }),
		refs:        store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }),
		st:          newState(),
		recordRev:   map[string]uint64{},
		writes:      make(chan writeJob, 1024),
		revs:        map[string]uint64{},
		writeFails:  make(chan error, 1),
	}
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
	loaded, err := lp.load(ctx, nodesW, statusW, headW)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}

	for range lp.cfg.Writers {
		lp.writersWG.Add(1)
		go lp.writer(ctx)
	}
	defer func() {
		close(lp.writes)
		lp.writersWG.Wait()
	}()

	if err := lp.step(ctx, loaded); err != nil {
		return err
	}
	save := time.NewTicker(lp.cfg.SaveInterval)
	defer save.Stop()
	tick := time.NewTicker(lp.cfg.TickInterval)
	defer tick.Stop()
	for {
		var ev event
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
			ev = evTick{}
		case e, ok := <-headW:
			if !ok {
				return errors.New("head watcher stopped")
			}
			if e.Value == nil {
				continue
			}
			rev, err := lp.revision(ctx, e.Value.GetRevision())
			if err != nil {
				return err
			}
			ev = evHeadMoved{head: e.Value, rev: rev}
		case e, ok := <-nodesW:
			if !ok {
				return errors.New("nodes watcher stopped")
			}
			if e.Value == nil && !e.Deleted {
				continue
			}
			ev = evPresence{node: e.Key, p: e.Value}
		case e, ok := <-statusW:
			if !ok {
				return errors.New("status watcher stopped")
			}
			switch {
			case e.Deleted:
				lp.forgetRev(contract.DesiredKey(e.Key))
				lp.forgetRev(contract.BackupKey(e.Key))
				ev = evReaped{node: e.Key}
			case e.Value == nil:
				continue
			default:
				ev = evStatus{s: e.Value}
			}
		}
		if err := lp.step(ctx, ev); err != nil {
			return err
		}
	}
}

// load reads everything the coordinator owns or depends on. Presence, status
// and head come from the watchers' initial values, so the live changes that
// follow continue exactly where the read ended.
func (lp *loop) load(ctx context.Context, nodesW <-chan store.Entry[*sluicev1.NodePresence],
	statusW <-chan store.Entry[*sluicev1.NodeStatus], headW <-chan store.Entry[*sluicev1.Head]) (evLoaded, error) {
	var ev evLoaded
	for e := range initial(ctx, nodesW) {
		ev.presence = append(ev.presence, e.Value)
	}
	for e := range initial(ctx, statusW) {
		ev.status = append(ev.status, e.Value)
	}
	for e := range initial(ctx, headW) {
		ev.head = e.Value
	}
	if ctx.Err() != nil {
		return ev, ctx.Err()
	}
	var err error
	if ev.head != nil {
		if ev.headRev, err = lp.revision(ctx, ev.head.GetRevision()); err != nil {
			return ev, err
		}
	}
	if ref, err := lp.refs.Get(ctx, contract.KeyLastApplied); err == nil {
		ev.lastApplied = ref.Value
		if ev.lastAppliedRev, err = lp.revision(ctx, ref.Value.GetRevision()); err != nil {
			return ev, err
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return ev, err
	}
	if ref, err := lp.refs.Get(ctx, contract.KeyActive); err == nil {
		r, err := lp.rollouts.Get(ctx, ref.Value.GetRollout())
		if err != nil {
			return ev, fmt.Errorf("active rollout: %w", err)
		}
		lp.recordRev[r.Key] = r.Revision
		ev.active = r.Value
		if ev.activeRev, err = lp.revision(ctx, r.Value.GetRevision()); err != nil {
			return ev, err
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return ev, err
	}
	configs, err := lp.nodeconfigs.List(ctx, ">")
	if err != nil {
		return ev, err
	}
	for _, c := range configs {
		lp.setRev(c.Key, c.Revision)
		switch _, which, _ := contract.NodeOfConfigKey(c.Key); which {
		case "desired":
			ev.desired = append(ev.desired, c.Value)
		case "backup":
			ev.backups = append(ev.backups, c.Value)
		}
	}
	bad, err := lp.invalid.List(ctx, ">")
	if err != nil {
		return ev, err
	}
	for _, f := range bad {
		ev.invalid = append(ev.invalid, f.Value)
	}
	lp.log.Info().Int("nodes", len(ev.presence)).Int("statuses", len(ev.status)).
		Str(logging.FieldRevision, ev.head.GetRevision()).Str(logging.FieldRollout, ev.active.GetId()).
		Msg("leading: state loaded")
	return ev, nil
}

// initial yields a watcher's initial values, up to its caught-up marker.
func initial[T proto.Message](ctx context.Context, w <-chan store.Entry[T]) func(func(store.Entry[T]) bool) {
	return func(yield func(store.Entry[T]) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w:
				if !ok || e.Key == "" {
					return
				}
				if e.Deleted || e.Err != nil {
					continue
				}
				if !yield(e) {
					return
				}
			}
		}
	}
}

func (lp *loop) revision(ctx context.Context, id string) (*sluicev1.Revision, error) {
	e, err := lp.revisions.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("revision %s: %w", id, err)
	}
	return e.Value, nil
}

// step runs decide and performs its actions in order.
func (lp *loop) step(ctx context.Context, ev event) error {
	for _, a := range decide(lp.st, ev, lp.cfg.Now()) {
		if err := lp.perform(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

func (lp *loop) perform(ctx context.Context, a action) error {
	switch a := a.(type) {
	case actWriteDesired:
		select {
		case lp.writes <- writeJob{desired: proto.Clone(a.desired).(*sluicev1.DesiredConfig), previous: a.previous}:
		case <-ctx.Done():
			return ctx.Err()
		}
	case actStartRollout:
		r := snapshot(a.rollout)
		if err := lp.saveRecord(ctx, r); err != nil {
			return err
		}
		ref := &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration(), At: r.GetStartedAt()}
		if err := lp.putRef(ctx, contract.KeyActive, ref); err != nil {
			return err
		}
	case actSaveRollout:
		lp.unsaved = a.rollout
	case actFinishRollout:
		lp.unsaved = nil
		r := snapshot(a.rollout)
		if err := lp.saveRecord(ctx, r); err != nil {
			return err
		}
		if r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
			ref := &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration(), At: r.GetFinishedAt()}
			if err := lp.putRef(ctx, contract.KeyLastApplied, ref); err != nil {
				return err
			}
		}
		if err := lp.clearActive(ctx, r.GetId()); err != nil {
			return err
		}
	case actRecordInvalid:
		if err := lp.fenced(); err != nil {
			return err
		}
		if _, err := lp.invalid.Create(ctx, a.fp.GetFingerprint(), a.fp); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("record invalid fingerprint: %w", err)
		}
	case actForgetInvalid:
		if err := lp.fenced(); err != nil {
			return err
		}
		cur, err := lp.invalid.Get(ctx, a.fingerprint)
		if err == nil {
			err = lp.invalid.Delete(ctx, a.fingerprint, cur.Revision)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("forget invalid fingerprint: %w", err)
		}
	case actEmit:
		lp.em.Emit(a.ev)
	}
	return nil
}

// flush writes rollout progress held back by the save interval.
func (lp *loop) flush(ctx context.Context) error {
	if lp.unsaved == nil {
		return nil
	}
	r := snapshot(lp.unsaved)
	lp.unsaved = nil
	return lp.saveRecord(ctx, r)
}

// fenced refuses writes once the lease may have expired: a deposed leader
// must not act on stale state.
func (lp *loop) fenced() error {
	if !lp.lease.valid(lp.cfg.Now()) {
		return errors.New("leader lease may have expired: refusing to write")
	}
	return nil
}

func (lp *loop) saveRecord(ctx context.Context, r *sluicev1.Rollout) error {
	if err := lp.fenced(); err != nil {
		return err
	}
	r.UpdatedAt = timestamppb.New(lp.cfg.Now())
	r.LeaderEpoch = lp.lease.epoch
	rev, err := lp.rollouts.Update(ctx, r.GetId(), r, lp.recordRev[r.GetId()])
	if errors.Is(err, store.ErrConflict) {
		// Written by an earlier term (e.g. before a restart): we are the
		// leader now, so ours replaces it.
		cur, gerr := lp.rollouts.Get(ctx, r.GetId())
		if gerr != nil && !errors.Is(gerr, store.ErrNotFound) {
			return gerr
		}
		rev, err = lp.rollouts.Update(ctx, r.GetId(), r, cur.Revision)
	}
	if err != nil {
		return fmt.Errorf("save rollout %s: %w", r.GetId(), err)
	}
	lp.recordRev[r.GetId()] = rev
	return nil
}

func (lp *loop) putRef(ctx context.Context, key string, ref *sluicev1.RolloutRef) error {
	if err := lp.fenced(); err != nil {
		return err
	}
	_, err := lp.refs.Mutate(ctx, key, func(*sluicev1.RolloutRef) (*sluicev1.RolloutRef, error) { return ref, nil })
	return err
}

func (lp *loop) clearActive(ctx context.Context, id string) error {
	if err := lp.fenced(); err != nil {
		return err
	}
	cur, err := lp.refs.Get(ctx, contract.KeyActive)
	if errors.Is(err, store.ErrNotFound) || (err == nil && cur.Value.GetRollout() != id) {
		return nil
	}
	if err != nil {
		return err
	}
	return lp.refs.Delete(ctx, contract.KeyActive, cur.Revision)
}

// writer writes desired configs, each with the node's previous desired config
// saved as its backup first. Control-plane errors are retried with backoff:
// they never count against a node.
func (lp *loop) writer(ctx context.Context) {
	defer lp.writersWG.Done()
	for job := range lp.writes {
		d := job.desired
		backoff := 50 * time.Millisecond
		for {
			err := lp.writeDesired(ctx, job)
			if err == nil || ctx.Err() != nil {
				break
			}
			if err := lp.fenced(); err != nil {
				select {
				case lp.writeFails <- err:
				default:
				}
				break
			}
			lp.log.Warn().Err(err).Str(logging.FieldNode, d.GetNode()).Dur("retry_in", backoff).Msg("write desired config: retrying")
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			job.previous = nil // re-read what the retry replaces
		}
	}
}

// writeDesired writes one desired config with CAS at the revision the loop
// last saw, so the common case costs one round trip (two with a backup). When
// the revision is unknown or stale it reads the key first.
func (lp *loop) writeDesired(ctx context.Context, job writeJob) error {
	d := job.desired
	key := contract.DesiredKey(d.GetNode())
	rev, known := lp.rev(key)
	prev := job.previous
	if !known || prev == nil && rev != 0 {
		cur, err := lp.nodeconfigs.Get(ctx, key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		rev, prev = cur.Revision, cur.Value
		lp.setRev(key, rev)
	}
	if prev.GetFingerprint() == d.GetFingerprint() && prev.GetRollout() == d.GetRollout() {
		return nil // written before a restart
	}
	if err := lp.fenced(); err != nil {
		return err
	}
	// A revert writes the backup back; the backup key keeps it.
	if prev != nil && prev.GetFingerprint() != d.GetFingerprint() && !d.GetRevert() {
		if err := lp.writeBackup(ctx, prev); err != nil {
			return err
		}
	}
	d.WrittenAt = timestamppb.New(lp.cfg.Now())
	d.LeaderEpoch = lp.lease.epoch
	nrev, err := lp.nodeconfigs.Update(ctx, key, d, rev)
	if err != nil {
		lp.forgetRev(key)
		return fmt.Errorf("write desired config of %s: %w", d.GetNode(), err)
	}
	lp.setRev(key, nrev)
	return nil
}

func (lp *loop) writeBackup(ctx context.Context, prev *sluicev1.DesiredConfig) error {
	key := contract.BackupKey(prev.GetNode())
	rev, known := lp.rev(key)
	if !known {
		cur, err := lp.nodeconfigs.Get(ctx, key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if cur.Value.GetFingerprint() == prev.GetFingerprint() && cur.Value != nil {
			lp.setRev(key, cur.Revision)
			return nil
		}
		rev = cur.Revision
	}
	nrev, err := lp.nodeconfigs.Update(ctx, key, prev, rev)
	if err != nil {
		lp.forgetRev(key)
		return fmt.Errorf("save backup of %s: %w", prev.GetNode(), err)
	}
	lp.setRev(key, nrev)
	return nil
}

// unknownRev marks a key whose revision must be read before writing.
const unknownRev = ^uint64(0)

// rev returns the revision to write key at. The load listed every key, so a
// key never seen does not exist (revision 0); a failed write marks it unknown.
func (lp *loop) rev(key string) (uint64, bool) {
	lp.revsMu.Lock()
	defer lp.revsMu.Unlock()
	r := lp.revs[key]
	return r, r != unknownRev
}

func (lp *loop) setRev(key string, rev uint64) {
	lp.revsMu.Lock()
	defer lp.revsMu.Unlock()
	lp.revs[key] = rev
}

func (lp *loop) forgetRev(key string) {
	lp.revsMu.Lock()
	defer lp.revsMu.Unlock()
	lp.revs[key] = unknownRev
}
