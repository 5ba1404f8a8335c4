package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// effects is everything the loop writes. The KV implementation (kvEffects)
// fences every write on the term (fence.go): desired configs and progress
// saves are single messages fenced on the bucket's _fence; starting and
// finishing a rollout, recording or forgiving a fingerprint and pruning
// records are atomic batches of compare-and-set ops whose last message
// checks the fence. Tests run scenario tables through Decide and a
// memEffects.
type effects interface {
	// writeDesired writes d, after saving backup (when set) as the node's
	// backup: two single fenced messages, the backup first, so that a
	// node's backup is never newer than its desired config.
	writeDesired(ctx context.Context, d, backup *sluicev1.DesiredConfig) error
	startRollout(ctx context.Context, r *sluicev1.Rollout) error
	saveRollout(ctx context.Context, r *sluicev1.Rollout) error
	finishRollout(ctx context.Context, f rollout.FinishRollout) error
	recordInvalid(ctx context.Context, f *sluicev1.InvalidFingerprint) error
	forgiveInvalid(ctx context.Context, f *sluicev1.InvalidFingerprint) error
}

// Errors that end a leadership term.
var (
	// errDeposed: another leader's term fenced ours; our write did not land.
	errDeposed = errors.New("deposed: a newer leadership term fenced this one")
	// errTerminalRecord: a rollout record we would write has ended already.
	errTerminalRecord = errors.New("the rollout record is terminal and is never written again")
)

// kvEffects writes to the KV buckets. Every write carries the term's
// fence; the ops of an atomic batch are also compare-and-set at the
// revision last read or written, while a single fenced message (a desired
// config, a backup, a progress save) checks the fence alone.
type kvEffects struct {
	term *term
	now  func() time.Time
	// before runs before every write (Config.BeforeWrite: tests hold a
	// leader there to play a paused process).
	before func(ctx context.Context)

	nodeconfigs *store.Store[*sluicev1.DesiredConfig]
	rollouts    *store.Store[*sluicev1.Rollout]
	refs        *store.Store[*sluicev1.RolloutRef]
	invalid     *store.Store[*sluicev1.InvalidFingerprint]

	// retention is how many ended rollout records are kept (Config.Retention).
	retention int
	log       zerolog.Logger
	emit      func(*sluicev1.Event)

	mu   sync.Mutex
	revs map[string]uint64 // bucket/key → revision last read or written (unknownRev: read it again)
	// keys holds revs for the nodeconfigs bucket's node keys, in the
	// loop's record of each node (fleetKeys): a fleet has two such keys
	// per node, which as "bucket/key" strings in revs cost 180 bytes per
	// node.
	keys *fleetKeys
	// listed names the buckets the term's load listed whole, delete markers
	// included: a key it did not see has never existed (revision 0).
	listed map[string]bool
}

// unknownRev marks a key whose revision must be read before writing it;
// absentRev a nodeconfigs revision slot that holds none (nodeKeys).
const (
	unknownRev = ^uint64(0)
	absentRev  = unknownRev - 1
)

// configSlot says where fleetKeys keeps key of bucket: its node and
// which of the two; ok false for every other key.
func configSlot(bucket, key string) (node string, i int, ok bool) {
	if bucket != contract.BucketNodeConfigs || contract.IsControlKey(key) {
		return "", 0, false
	}
	node, which, ok := contract.NodeOfConfigKey(key)
	switch {
	case !ok:
		return "", 0, false
	case which == "desired":
		return node, 0, true
	case which == "backup":
		return node, 1, true
	}
	return "", 0, false
}

func (k *kvEffects) rev(bucket, key string) (uint64, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var r uint64
	var ok bool
	if node, i, isConfig := configSlot(bucket, key); isConfig {
		r, ok = k.keys.configRev(node, i)
	} else {
		r, ok = k.revs[bucket+"/"+key]
	}
	if !ok && k.listed[bucket] {
		return 0, true
	}
	return r, ok && r != unknownRev
}

func (k *kvEffects) setRev(bucket, key string, rev uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if node, i, ok := configSlot(bucket, key); ok {
		k.keys.setConfigRev(node, i, rev)
		return
	}
	k.revs[bucket+"/"+key] = rev
}

func (k *kvEffects) forget(bucket, key string) {
	if k == nil {
		return // a loop on other effects (tests) has no revisions to forget
	}
	k.setRev(bucket, key, unknownRev)
}

// revOf returns key's revision, reading it when unknown. A missing key is 0.
func revOf[T proto.Message](ctx context.Context, k *kvEffects, st *store.Store[T], key string) (uint64, T, error) {
	var zero T
	if r, ok := k.rev(st.Bucket(), key); ok {
		return r, zero, nil
	}
	e, err := st.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// A deleted key keeps its delete marker: a write must name it.
		rev, err := k.term.batchers[st.Bucket()].LastRevision(ctx, key)
		if err != nil {
			return 0, zero, err
		}
		k.setRev(st.Bucket(), key, rev)
		return rev, zero, nil
	case errors.Is(err, store.ErrUndecodable):
		// Quarantined: ours to overwrite.
		k.setRev(st.Bucket(), key, e.Revision)
		return e.Revision, zero, nil
	case err != nil:
		return 0, zero, err
	}
	k.setRev(st.Bucket(), key, e.Revision)
	return e.Revision, e.Value, nil
}

// write writes ops as one atomic batch, each op compare-and-set, fenced on the term.
func (k *kvEffects) write(ctx context.Context, bucket string, ops []store.Op) ([]uint64, error) {
	return k.fenced(ctx, bucket, ops, func() ([]uint64, error) {
		return k.term.batchers[bucket].Write(ctx, ops, k.term.fences[bucket])
	})
}

// writeOne writes one op as a single message fenced on the term (see
// store.Batcher.WriteFenced: its own revision is not checked).
func (k *kvEffects) writeOne(ctx context.Context, bucket string, op store.Op) error {
	_, err := k.fenced(ctx, bucket, []store.Op{op}, func() ([]uint64, error) {
		rev, err := k.term.batchers[bucket].WriteFenced(ctx, op, k.term.fences[bucket])
		return []uint64{rev}, err
	})
	return err
}

// fenced runs the hook, checks the lease clock, sends ops with send and
// keeps their revisions; a lost race on the fence means we were deposed.
func (k *kvEffects) fenced(ctx context.Context, bucket string, ops []store.Op, send func() ([]uint64, error)) ([]uint64, error) {
	if k.before != nil {
		k.before(ctx)
	}
	if err := k.term.check(k.now()); err != nil {
		return nil, err
	}
	revs, err := send()
	if err != nil {
		for _, op := range ops {
			k.forget(bucket, op.Key)
		}
		if errors.Is(err, store.ErrConflict) && k.term.fencedOut(ctx, bucket) {
			return nil, fmt.Errorf("%w (write to %s refused by the server)", errDeposed, bucket)
		}
		return nil, err
	}
	for i, op := range ops {
		k.setRev(bucket, op.Key, revs[i])
	}
	return revs, nil
}

func (k *kvEffects) writeDesired(ctx context.Context, d, backup *sluicev1.DesiredConfig) error {
	key := contract.DesiredKey(d.GetNode())
	_, cur, err := revOf(ctx, k, k.nodeconfigs, key)
	if err != nil {
		return err
	}
	if cur != nil && cur.GetFingerprint() == d.GetFingerprint() && cur.GetRollout() == d.GetRollout() && cur.GetRevert() == d.GetRevert() {
		return nil // written before (a retry after an unknown outcome)
	}
	d.WrittenAt = timestamppb.New(k.now())
	d.LeaderEpoch = k.term.epoch
	// Desired configs are the hot path: each is one message fenced on the
	// term (the leader is their only writer, and the loop writes each node's
	// configs in order), the backup first, so that a node's backup is
	// never newer than its desired config.
	if backup != nil {
		if err := k.writeOne(ctx, contract.BucketNodeConfigs, store.Op{Key: contract.BackupKey(d.GetNode()), Value: backup}); err != nil {
			return fmt.Errorf("save backup of %s: %w", d.GetNode(), err)
		}
	}
	if err := k.writeOne(ctx, contract.BucketNodeConfigs, store.Op{Key: key, Value: d}); err != nil {
		return fmt.Errorf("write desired config of %s: %w", d.GetNode(), err)
	}
	return nil
}

// recordOp returns the op writing r, refusing to overwrite a terminal record
// or one a newer term wrote.
func (k *kvEffects) recordOp(ctx context.Context, r *sluicev1.Rollout) (store.Op, error) {
	rev, cur, err := revOf(ctx, k, k.rollouts, r.GetId())
	if err != nil {
		return store.Op{}, err
	}
	if cur != nil {
		if contract.Terminal(cur.GetPhase()) {
			return store.Op{}, fmt.Errorf("rollout %s (%s): %w", r.GetId(), cur.GetPhase(), errTerminalRecord)
		}
		if cur.GetLeaderEpoch() > k.term.epoch {
			return store.Op{}, fmt.Errorf("rollout %s was written by term %d: %w", r.GetId(), cur.GetLeaderEpoch(), errDeposed)
		}
	}
	r.UpdatedAt = timestamppb.New(k.now())
	r.LeaderEpoch = k.term.epoch
	return store.Op{Key: r.GetId(), Value: r, Revision: rev}, nil
}

func (k *kvEffects) refOp(ctx context.Context, key string, ref *sluicev1.RolloutRef) (store.Op, error) {
	rev, cur, err := revOf(ctx, k, k.refs, key)
	if err != nil {
		return store.Op{}, err
	}
	if cur.GetLeaderEpoch() > k.term.epoch {
		return store.Op{}, fmt.Errorf("rollouts/%s was written by term %d: %w", key, cur.GetLeaderEpoch(), errDeposed)
	}
	if ref != nil {
		ref.LeaderEpoch = k.term.epoch
	}
	return store.Op{Key: key, Value: ref, Revision: rev}, nil
}

// retry runs a batch built by build, once more after a conflict with the
// revisions re-read (the key may have been written by an earlier term).
func (k *kvEffects) retry(ctx context.Context, bucket string, build func() ([]store.Op, error)) error {
	for attempt := 0; ; attempt++ {
		ops, err := build()
		if err != nil {
			return err
		}
		if len(ops) == 0 {
			return nil
		}
		_, err = k.write(ctx, bucket, ops)
		if err == nil || !errors.Is(err, store.ErrConflict) || attempt >= 2 {
			return err
		}
	}
}

func (k *kvEffects) startRollout(ctx context.Context, r *sluicev1.Rollout) error {
	err := k.retry(ctx, contract.BucketRollouts, func() ([]store.Op, error) {
		rec, err := k.recordOp(ctx, r)
		if err != nil {
			return nil, err
		}
		ref, err := k.refOp(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(),
			Generation: r.GetGeneration(), At: r.GetStartedAt()})
		if err != nil {
			return nil, err
		}
		return []store.Op{rec, ref}, nil
	})
	if err != nil {
		return fmt.Errorf("start rollout %s: %w", r.GetId(), err)
	}
	return nil
}

// saveRollout writes a running rollout's progress: frequent, so one message
// fenced on the term (the loop is the record's only writer within a term,
// and writes it in order); starting and finishing are atomic batches.
func (k *kvEffects) saveRollout(ctx context.Context, r *sluicev1.Rollout) error {
	rec, err := k.recordOp(ctx, r)
	if err == nil {
		err = k.writeOne(ctx, contract.BucketRollouts, rec)
	}
	if err != nil {
		return fmt.Errorf("save rollout %s: %w", r.GetId(), err)
	}
	return nil
}

// finishRollout writes the terminal record, the last-applied reference and
// the cleared active pointer as one atomic batch: a crash leaves all or none.
func (k *kvEffects) finishRollout(ctx context.Context, f rollout.FinishRollout) error {
	err := k.retry(ctx, contract.BucketRollouts, func() ([]store.Op, error) {
		var ops []store.Op
		if f.Rollout != nil {
			rec, err := k.recordOp(ctx, f.Rollout)
			if err != nil {
				return nil, err
			}
			ops = append(ops, rec)
		}
		if f.LastApplied != nil {
			ref, err := k.refOp(ctx, contract.KeyLastApplied, f.LastApplied)
			if err != nil {
				return nil, err
			}
			ops = append(ops, ref)
		}
		if f.ClearActive != "" {
			rev, cur, err := revOf(ctx, k, k.refs, contract.KeyActive)
			if err != nil {
				return nil, err
			}
			if rev != 0 && (cur == nil || cur.GetRollout() == f.ClearActive) {
				ops = append(ops, store.Op{Key: contract.KeyActive, Revision: rev})
			}
		}
		return ops, nil
	})
	if err != nil {
		return fmt.Errorf("finish rollout %s: %w", f.ClearActive, err)
	}
	return k.prune(ctx)
}

// prune deletes the ended rollout records beyond the retention
// (rollout.Prune chooses them), fenced like every write. Failing to prune
// is logged and tried again at the next finish; only being deposed ends
// the term.
func (k *kvEffects) prune(ctx context.Context) error {
	if k.retention <= 0 {
		return nil
	}
	entries, err := k.rollouts.List(ctx, ">")
	if err != nil {
		k.log.Warn().Err(err).Msg("list rollout records to prune; trying again at the next finish")
		return nil
	}
	var records []*sluicev1.Rollout
	revs := map[string]uint64{}
	for _, e := range entries {
		if contract.IsControlKey(e.Key) || e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied || e.Err != nil {
			continue
		}
		e.Value.Id = e.Key
		records = append(records, e.Value)
		revs[e.Key] = e.Revision
	}
	var protect []string
	if ref, err := k.refs.Get(ctx, contract.KeyLastApplied); err == nil {
		protect = append(protect, ref.Value.GetRollout())
	}
	if ref, err := k.refs.Get(ctx, contract.KeyActive); err == nil {
		protect = append(protect, ref.Value.GetRollout())
	}
	ids := rollout.Prune(records, k.retention, protect...)
	for len(ids) > 0 {
		n := min(len(ids), 100)
		ops := make([]store.Op, 0, n)
		for _, id := range ids[:n] {
			ops = append(ops, store.Op{Key: id, Revision: revs[id]})
		}
		if _, err := k.write(ctx, contract.BucketRollouts, ops); err != nil {
			if errors.Is(err, errDeposed) {
				return err
			}
			k.log.Warn().Err(err).Msg("delete old rollout records; trying again at the next finish")
			return nil
		}
		reason := fmt.Sprintf("kept the newest %d ended rollouts; deleted the records of %d older ones (%s … %s)",
			k.retention, n, ids[0], ids[n-1])
		k.log.Info().Int("deleted", n).Str(logging.FieldReason, reason).Msg("rollout records pruned")
		if k.emit != nil {
			k.emit(&sluicev1.Event{Kind: contract.KindRollout, Id: ids[n-1], Type: "RolloutRecordsPruned", Reason: reason})
		}
		ids = ids[n:]
	}
	return nil
}

func (k *kvEffects) recordInvalid(ctx context.Context, f *sluicev1.InvalidFingerprint) error {
	f.LeaderEpoch = k.term.epoch
	rev, cur, err := revOf(ctx, k, k.invalid, f.GetFingerprint())
	if err != nil {
		return err
	}
	if cur != nil && cur.GetForgiven() == nil {
		return nil // recorded already (a forgiven record is replaced: it failed again)
	}
	_, err = k.write(ctx, contract.BucketFingerprints, []store.Op{{Key: f.GetFingerprint(), Value: f, Revision: rev}})
	if errors.Is(err, store.ErrConflict) {
		// Recorded meanwhile, or the conflict was something else: ask the
		// stream's leader (a direct get may be served by a lagging replica).
		// Not recorded: the error ends the term, and the next one records it
		// from the node's status (chaos seed 1342).
		if last, lerr := k.term.batchers[contract.BucketFingerprints].LastRevision(ctx, f.GetFingerprint()); lerr == nil && last != 0 && last != rev {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("record invalid fingerprint %s: %w", f.GetFingerprint(), err)
	}
	return nil
}

// forgiveInvalid rewrites a recorded fingerprint with its forgiveness; one
// that is no longer stored is left alone.
func (k *kvEffects) forgiveInvalid(ctx context.Context, f *sluicev1.InvalidFingerprint) error {
	f.LeaderEpoch = k.term.epoch
	err := k.retry(ctx, contract.BucketFingerprints, func() ([]store.Op, error) {
		rev, _, err := revOf(ctx, k, k.invalid, f.GetFingerprint())
		if err != nil || rev == 0 {
			return nil, err
		}
		return []store.Op{{Key: f.GetFingerprint(), Value: f, Revision: rev}}, nil
	})
	if err != nil {
		return fmt.Errorf("forgive invalid fingerprint %s: %w", f.GetFingerprint(), err)
	}
	return nil
}
