package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// election holds the coordinator's leader lease in the leases bucket. The
// bucket's TTL expires a lease that is not renewed; renewals are CAS updates,
// so two instances can never both renew.
type election struct {
	leases *store.Store[*sluicev1.LeaderLease]
	cfg    Config
	log    zerolog.Logger
	em     *events.Emitter
}

// lease is one leadership term. epoch (the revision the lease was acquired
// at) is written into every record the leader writes.
type lease struct {
	epoch      uint64
	rev        uint64
	acquired   *timestamppb.Timestamp
	validUntil atomic.Int64 // unix nanos; the leader stops writing after it
}

// valid reports whether the leader may still write at now: the lease must
// have been renewed recently enough that it cannot have expired on the server.
func (l *lease) valid(now time.Time) bool { return now.UnixNano() < l.validUntil.Load() }

func newElection(kv jetstream.KeyValue, cfg Config, log zerolog.Logger, em *events.Emitter) *election {
	return &election{
		leases: store.New(kv, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} }),
		cfg:    cfg, log: log, em: em,
	}
}

func (e *election) margin() time.Duration {
	return e.cfg.Settings.LeaderLease - e.cfg.Settings.RenewInterval()
}

// acquire blocks until this instance holds the lease or ctx ends.
func (e *election) acquire(ctx context.Context) (*lease, error) {
	for {
		now := e.cfg.Now()
		v := &sluicev1.LeaderLease{Holder: e.cfg.Instance, AcquiredAt: timestamppb.New(now), RenewedAt: timestamppb.New(now)}
		cur, err := e.leases.Get(ctx, contract.LeaseCoordinator)
		var rev uint64
		switch {
		case errors.Is(err, store.ErrNotFound):
			rev, err = e.leases.Create(ctx, contract.LeaseCoordinator, v)
		case err == nil && cur.Value.GetHolder() == e.cfg.Instance:
			// Our own lease from before a restart: take it over.
			rev, err = e.leases.Update(ctx, contract.LeaseCoordinator, v, cur.Revision)
		case err == nil:
			err = store.ErrConflict // someone else leads
		}
		if err == nil {
			l := &lease{epoch: rev, rev: rev, acquired: v.AcquiredAt}
			l.validUntil.Store(now.Add(e.margin()).UnixNano())
			e.em.Emit(&sluicev1.Event{Kind: "leader", Id: Component, Type: "LeadershipAcquired",
				Reason: "instance " + e.cfg.Instance + " holds the coordinator lease"})
			return l, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			e.log.Warn().Err(err).Msg("leader lease: retrying")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(e.cfg.Settings.RenewInterval()):
		}
	}
}

// keep renews l until ctx ends; when the lease is lost or cannot be renewed
// before it could expire, it cancels the term.
func (e *election) keep(ctx context.Context, l *lease, lost context.CancelFunc) {
	t := time.NewTicker(e.cfg.Settings.RenewInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := e.cfg.Now()
		rev, err := e.leases.Update(ctx, contract.LeaseCoordinator,
			&sluicev1.LeaderLease{Holder: e.cfg.Instance, AcquiredAt: l.acquired, RenewedAt: timestamppb.New(now)}, l.rev)
		switch {
		case err == nil:
			l.rev = rev
			l.validUntil.Store(now.Add(e.margin()).UnixNano())
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			e.em.Emit(&sluicev1.Event{Kind: "leader", Id: Component, Type: "LeadershipLost",
				Reason: "the lease was taken or expired: " + err.Error()})
			lost()
			return
		default:
			if !l.valid(e.cfg.Now()) {
				e.em.Emit(&sluicev1.Event{Kind: "leader", Id: Component, Type: "LeadershipLost",
					Reason: "could not renew the lease before it could expire: " + err.Error()})
				lost()
				return
			}
			e.log.Warn().Err(err).Msg("renew leader lease: retrying")
		}
	}
}

// release gives the lease up at the end of a term so another instance need
// not wait for it to expire. It is a CAS delete: a lease already lost stays.
func (e *election) release(l *lease) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e.leases.Delete(ctx, contract.LeaseCoordinator, l.rev); err == nil {
		e.log.Info().Msg("released the leader lease")
	}
}
