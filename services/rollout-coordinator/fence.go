package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Fencing (invariant I6): the leader lease elects, the fences enforce. A
// term starts by rewriting the _fence key of every bucket the coordinator
// writes with the term's epoch; every write of the term checks that _fence
// is still at the revision the term wrote: a desired config or a progress
// save is one message expecting _fence's last sequence
// (store.Batcher.WriteFenced), every other write a JetStream atomic batch
// whose last message checks it. A newer term's fence makes every write of an
// older one fail on the server, however late it arrives (a paused process,
// a slow network): the deposed leader's writes never land. docs/architecture.md
// explains the choice.

// fencedBuckets are the buckets the coordinator writes.
var fencedBuckets = []string{contract.BucketNodeConfigs, contract.BucketRollouts, contract.BucketFingerprints}

// fenceCheckKey is the throwaway key each fenced batch ends with.
const fenceCheckKey = contract.KeyFence + ".check"

// term is one leadership term: its lease, its epoch and its fences.
type term struct {
	lease    *lease
	epoch    uint64
	fences   map[string]*store.Fence
	batchers map[string]*store.Batcher
	stores   map[string]*store.Store[*sluicev1.Fence]
}

// startTerm fences every coordinator bucket for a new term. The epoch is
// one above the highest fence found, so it counts terms (1, 2, 3 …): the
// lease's revision, which every renewal raises, made terms jump (1 → 17 →
// 31) by how long the last one lasted. Only when no fence can be read (the
// first term, or every fence spoiled) is the lease revision the epoch:
// it never goes below what an earlier term of these buckets wrote there.
// Safety does not rest on the number: each fence is written by
// compare-and-set on the revision read, so of two terms that computed one
// epoch only one fences every bucket.
func startTerm(ctx context.Context, nc *nats.Conn, b *buckets.Set, l *lease, holder string, now time.Time) (*term, error) {
	t := &term{lease: l, fences: map[string]*store.Fence{}, batchers: map[string]*store.Batcher{}, stores: map[string]*store.Store[*sluicev1.Fence]{}}
	kvs := map[string]jetstream.KeyValue{
		contract.BucketNodeConfigs: b.NodeConfigs, contract.BucketRollouts: b.Rollouts, contract.BucketFingerprints: b.Fingerprints,
	}
	found := map[string]store.Entry[*sluicev1.Fence]{}
	var epoch uint64
	for _, name := range fencedBuckets {
		st := store.New(kvs[name], func() *sluicev1.Fence { return &sluicev1.Fence{} })
		t.stores[name] = st
		t.batchers[name] = store.NewBatcher(nc, name)
		e, err := st.Get(ctx, contract.KeyFence)
		if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUndecodable) {
			return nil, fmt.Errorf("read fence of %s: %w", name, err)
		}
		found[name] = e
		if e.Value.GetEpoch() > 0 {
			epoch = max(epoch, e.Value.GetEpoch()+1)
		}
	}
	if epoch == 0 {
		epoch = max(1, l.rev)
	}
	t.epoch = epoch
	for _, name := range fencedBuckets {
		f := &sluicev1.Fence{Epoch: epoch, Holder: holder, At: timestamppb.New(now)}
		rev, err := t.stores[name].Update(ctx, contract.KeyFence, f, found[name].Revision)
		if err != nil {
			return nil, fmt.Errorf("fence %s for term %d: %w", name, epoch, err)
		}
		t.fences[name] = &store.Fence{Key: contract.KeyFence, Check: fenceCheckKey, Revision: rev}
	}
	return t, nil
}

// check refuses writes once the lease may have expired by our own clock:
// the first, cheap line of defence; the fences are the one that holds.
func (t *term) check(now time.Time) error {
	if !t.lease.valid(now) {
		return errors.New("leader lease may have expired: refusing to write")
	}
	return nil
}

// fencedOut reports whether bucket's fence moved past this term's, as the
// stream's leader has it (a direct get may be answered by a replica that has
// not seen the newer term's fence yet).
func (t *term) fencedOut(ctx context.Context, bucket string) bool {
	last, err := t.batchers[bucket].LastRevision(ctx, contract.KeyFence)
	if err != nil {
		return false // unknown: the caller's error stands, and is retried
	}
	return last != t.fences[bucket].Revision // a newer fence, or a deleted one
}
