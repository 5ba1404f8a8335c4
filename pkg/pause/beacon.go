package pause

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Beacon keeps one service instance's presence in the instances bucket:
// written at start, on every change of its role or acknowledgement, and
// every third of the node lease; deleted when Run returns, so an operator
// waiting for a pause never waits for an instance that stopped cleanly
// (one that died is dropped by the bucket's TTL).
type Beacon struct {
	st       *store.Store[*sluicev1.Instance]
	key      string
	interval time.Duration
	log      zerolog.Logger
	now      func() time.Time

	mu   sync.Mutex
	cur  *sluicev1.Instance
	kick chan struct{}
}

// NewBeacon returns the beacon of instance of component in the instances
// bucket kv, renewed every interval.
func NewBeacon(kv jetstream.KeyValue, component, instance, version string, interval time.Duration,
	log zerolog.Logger, now func() time.Time) *Beacon {
	host, _ := os.Hostname()
	return &Beacon{
		st:       store.New(kv, func() *sluicev1.Instance { return &sluicev1.Instance{} }),
		key:      contract.InstanceKey(component, instance),
		interval: interval,
		log:      log,
		now:      now,
		cur: &sluicev1.Instance{Component: component, Instance: instance, Host: host, Version: version,
			StartedAt: timestamppb.New(now())},
		kick: make(chan struct{}, 1),
	}
}

// Set changes what the beacon announces and writes it soon. A nil ack
// leaves the acknowledgement as it is; role "" leaves the role.
func (b *Beacon) Set(ack *sluicev1.PauseAck, role string) {
	b.mu.Lock()
	if ack != nil {
		b.cur.Pause = proto.Clone(ack).(*sluicev1.PauseAck)
	}
	if role != "" {
		b.cur.Role = role
	}
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Run writes the presence until ctx ends, then deletes it.
func (b *Beacon) Run(ctx context.Context) {
	var rev uint64
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.remove(dctx, rev)
	}()
	// Retries: 1 s up to the renewal interval: the presence outlives a few missed renewals, and a failing write is not repeated faster than renewals.
	retry := backoff.New(backoff.Policy{Base: min(time.Second, b.interval), Cap: b.interval})
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-t.C:
		}
		n, err := b.write(ctx, rev)
		if err != nil {
			if ctx.Err() != nil {
				return // a renewal cut short: remove reads the key again
			}
			b.log.Warn().Err(err).Str("key", b.key).Msg("write instance presence; retrying")
			rev = 0
			t.Reset(retry.Next())
			continue
		}
		rev = n
		retry.Reset()
		t.Reset(b.interval)
	}
}

// remove deletes the presence at stop. The key is this instance's alone,
// so when rev is not its revision — a renewal cut short by the stop may
// have landed without its answer, or none was known — it deletes the
// revision it reads: a stopped instance must not stay listed until the
// bucket's TTL, holding up sluice pause --wait.
func (b *Beacon) remove(ctx context.Context, rev uint64) {
	if rev != 0 {
		if err := b.st.Delete(ctx, b.key, rev); !errors.Is(err, store.ErrConflict) {
			return
		}
	}
	e, err := b.st.Get(ctx, b.key)
	if err != nil && !errors.Is(err, store.ErrUndecodable) {
		return // not there, or unreachable: the TTL ends it
	}
	if err := b.st.Delete(ctx, b.key, e.Revision); err != nil && !errors.Is(err, store.ErrNotFound) {
		b.log.Warn().Err(err).Str("key", b.key).Msg("remove instance presence at stop; it ends with the bucket's TTL")
	}
}

// write renews the presence at rev, re-reading it when rev is stale (expired, or 0).
func (b *Beacon) write(ctx context.Context, rev uint64) (uint64, error) {
	b.mu.Lock()
	b.cur.HeartbeatAt = timestamppb.New(b.now())
	v := proto.Clone(b.cur).(*sluicev1.Instance)
	b.mu.Unlock()
	if rev != 0 {
		n, err := b.st.Update(ctx, b.key, v, rev)
		if err == nil || (!errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound)) {
			return n, err
		}
	}
	e, err := b.st.Get(ctx, b.key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return b.st.Create(ctx, b.key, v)
	case err != nil && !errors.Is(err, store.ErrUndecodable):
		return 0, err
	}
	n, err := b.st.Update(ctx, b.key, v, e.Revision)
	if err != nil {
		return 0, fmt.Errorf("instance %s: %w", b.key, err)
	}
	return n, nil
}
