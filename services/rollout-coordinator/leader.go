package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// election holds the coordinator's leader lease in the leases bucket. The
// bucket's TTL expires a lease that is not renewed; renewals are CAS updates,
// so two instances can never both renew.
//
// The lease it renews by is the bucket's TTL, the lease in force, not its
// own --leader-lease: that sets the TTL only when the coordinator starts
// while no lease is held (pkg/buckets). The TTL can still change under a
// running instance (a coordinator started while none led, one of an older
// release, an operator's `nats kv edit`): it reads the TTL again before
// each campaign and after each renewal, and follows it at once, so that
// its renew interval stays a quarter of the TTL in force.
type election struct {
	leases  *store.Store[*sluicev1.LeaderLease]
	kv      jetstream.KeyValue
	ttl     atomic.Int64 // the lease in force (the bucket's TTL), in nanoseconds
	cfg     Config
	log     zerolog.Logger
	em      *events.Emitter
	roles   *roles // told what this instance learns of who leads
	session string // random per process: tells two instances of one name apart

	// Standing by: the lease seen last, to log each new holder once and to
	// tell a dead predecessor of our own name from a live duplicate.
	seenHolder   string
	seenAcquired time.Time
	seenRev      uint64
	seenSince    time.Time
}

// lease is one leadership term. epoch (the revision the lease was acquired
// at) is written into every record the leader writes.
type lease struct {
	epoch      uint64 // set when the term's fences are written
	rev        uint64
	acquired   *timestamppb.Timestamp
	renewed    time.Time    // when the lease was last written; only the term's renewals touch it
	validUntil atomic.Int64 // unix nanos; the leader stops writing after it
}

// valid reports whether the leader may still write at now: the lease must
// have been renewed recently enough that it cannot have expired on the server.
func (l *lease) valid(now time.Time) bool { return now.UnixNano() < l.validUntil.Load() }

// newElection campaigns in kv, whose TTL (the lease in force) Prepare found
// to be ttl (zero: cfg's --leader-lease, until it is read).
func newElection(kv jetstream.KeyValue, ttl time.Duration, cfg Config, log zerolog.Logger, em *events.Emitter, r *roles) *election {
	e := &election{
		leases: store.New(kv, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} }),
		kv:     kv, cfg: cfg, log: log, em: em, roles: r, session: nuid.Next(),
	}
	if ttl <= 0 {
		ttl = cfg.Settings.LeaderLease
	}
	e.ttl.Store(int64(ttl))
	return e
}

// settings are cfg's with the lease in force as LeaderLease: its
// RenewInterval is the one to renew at.
func (e *election) settings() contract.Settings {
	s := e.cfg.Settings
	s.LeaderLease = time.Duration(e.ttl.Load())
	return s
}

func (e *election) margin() time.Duration {
	s := e.settings()
	return s.LeaderLease - s.RenewInterval()
}

// follow reads the leases bucket's TTL and takes it as the lease in force
// when it changed, logging the change once; it reports whether it did. A
// TTL that cannot be read within a renew interval leaves the lease as it
// was (the lease's own read or write says what is wrong): a slow answer
// must not hold up the next renewal.
func (e *election) follow(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, min(store.AttemptTimeout, e.settings().RenewInterval()))
	ttl, err := buckets.LeaderLease(cctx, e.kv)
	cancel()
	if err != nil || ttl <= 0 {
		e.log.Debug().Err(err).Dur("ttl", ttl).Msg("read the leader lease in force; keeping the one known")
		return false
	}
	was := time.Duration(e.ttl.Swap(int64(ttl)))
	if was == ttl {
		return false
	}
	e.log.Info().Dur("lease", ttl).Dur("was", was).Dur("flag", e.cfg.Settings.LeaderLease).
		Str("reason", "the TTL of "+contract.BucketLeases+" changed").
		Msgf("leader lease now %s (was %s): the TTL of %s changed; renewing every %s", ttl, was, contract.BucketLeases, e.settings().RenewInterval())
	return true
}

// acquire blocks until this instance holds the lease or ctx ends. A lease
// held under our own instance name by another process is taken over only
// once it has stopped being renewed (our predecessor died); while it is
// renewed, a live duplicate runs and acquire fails with ErrDuplicateInstance.
//
// While standing by it watches the lease key: a release (a clean stop of
// the leader deletes it) or an expiry (the bucket's TTL marker) is acted on
// at once, not at the next poll; a renewal makes it look again. It still
// looks every renew interval, for a watch that failed or missed a change.
func (e *election) acquire(ctx context.Context) (*lease, error) {
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changes, werr := e.leases.Watch(wctx, contract.LeaseCoordinator)
	if werr != nil {
		e.log.Debug().Err(werr).Msg("watch the leader lease; polling it every renew interval instead")
	}
	// A lease that cannot be read or written is tried again from the renew
	// interval up to the lease, jittered (a change the watch sees still
	// wakes it at once).
	failing := backoff.New(backoff.Policy{Base: e.settings().RenewInterval(), Cap: e.settings().LeaderLease})
	for {
		// The TTL in force, read before every look: the term's renewals,
		// and telling a dead predecessor from a live one, go by it.
		e.follow(ctx)
		now := e.cfg.Now()
		v := &sluicev1.LeaderLease{Holder: e.cfg.Instance, Session: e.session, AcquiredAt: timestamppb.New(now), RenewedAt: timestamppb.New(now)}
		// Bounded: store's reads ask again until their ctx ends, and an
		// instance that cannot read the lease must say so (not ready).
		gctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		cur, err := e.leases.Get(gctx, contract.LeaseCoordinator)
		cancel()
		var rev uint64
		switch {
		case errors.Is(err, store.ErrNotFound):
			rev, err = e.leases.Create(ctx, contract.LeaseCoordinator, v)
		case errors.Is(err, store.ErrUndecodable):
			rev, err = e.leases.Update(ctx, contract.LeaseCoordinator, v, cur.Revision)
		case err == nil && cur.Value.GetHolder() == e.cfg.Instance && cur.Value.GetSession() == e.session:
			// Ours from an earlier term of this process: take it again.
			rev, err = e.leases.Update(ctx, contract.LeaseCoordinator, v, cur.Revision)
		case err == nil && cur.Value.GetHolder() == e.cfg.Instance:
			// Our name, another process: a predecessor that died, or a duplicate.
			if e.seenHolder == e.cfg.Instance && e.seenRev != 0 && e.seenRev != cur.Revision {
				return nil, fmt.Errorf("%w: the lease is held by %s (session %s) and renewed; instance names must be unique",
					ErrDuplicateInstance, e.cfg.Instance, cur.Value.GetSession())
			}
			if e.seenRev == cur.Revision && now.Sub(e.seenSince) > e.settings().RenewInterval()*3/2 {
				rev, err = e.leases.Update(ctx, contract.LeaseCoordinator, v, cur.Revision) // not renewed: it died
			} else {
				e.standBy(cur, now)
				err = store.ErrConflict
			}
		case err == nil:
			e.standBy(cur, now)
			err = store.ErrConflict // someone else leads
		}
		if err == nil {
			l := &lease{rev: rev, acquired: v.AcquiredAt, renewed: now}
			l.validUntil.Store(now.Add(e.margin()).UnixNano())
			e.seenHolder, e.seenAcquired, e.seenRev = "", time.Time{}, 0
			e.roles.acquired()
			return l, nil
		}
		wait := e.settings().RenewInterval() // standing by: look again
		if errors.Is(err, store.ErrConflict) {
			failing.Reset()
		} else {
			wait = failing.Next()
			e.roles.leaseUnreadable(err)
			e.log.Warn().Err(err).Dur("retry_in", wait).Msg("leader lease: retrying")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case _, ok := <-changes:
			if !ok {
				changes = nil // the watch ended: poll
			}
		case <-time.After(wait):
		}
	}
}

// standBy notes the lease someone else holds, logging when this instance
// starts standing by and whenever the holder (or its term) changes.
func (e *election) standBy(cur store.Entry[*sluicev1.LeaderLease], now time.Time) {
	if cur.Revision != e.seenRev {
		e.seenRev, e.seenSince = cur.Revision, now
	}
	holder, since := cur.Value.GetHolder(), cur.Value.GetAcquiredAt().AsTime()
	if holder != e.seenHolder || !since.Equal(e.seenAcquired) {
		e.seenHolder, e.seenAcquired = holder, since
		e.log.Info().Str("holder", holder).Time("since", since).Uint64("term", cur.Value.GetEpoch()).
			Msgf("standing by: lease held by %s since %s", holder, since.UTC().Format(time.RFC3339))
	}
	e.roles.standingBy(holder, since, cur.Value.GetEpoch())
}

// announce publishes the term's epoch in the lease and emits LeadershipAcquired.
func (e *election) announce(ctx context.Context, l *lease) error {
	if err := e.renew(ctx, l); err != nil {
		return err
	}
	e.em.Emit(&sluicev1.Event{Kind: contract.KindLeader, Id: Component, Type: contract.EventLeadershipAcquired,
		Reason: fmt.Sprintf("instance %s holds the coordinator lease; term %d", e.cfg.Instance, l.epoch)})
	return nil
}

func (e *election) renew(ctx context.Context, l *lease) error {
	if e.cfg.BeforeWrite != nil {
		e.cfg.BeforeWrite(ctx) // a paused process renews nothing either
	}
	now := e.cfg.Now()
	rev, err := e.leases.Update(ctx, contract.LeaseCoordinator, &sluicev1.LeaderLease{Holder: e.cfg.Instance, Session: e.session,
		AcquiredAt: l.acquired, RenewedAt: timestamppb.New(now), Epoch: l.epoch}, l.rev)
	if err == nil {
		l.rev = rev
		l.renewed = now
		l.validUntil.Store(now.Add(e.margin()).UnixNano())
	}
	return err
}

// keep renews l until ctx ends; when the lease is lost or cannot be renewed
// before it could expire, it cancels the term.
func (e *election) keep(ctx context.Context, l *lease, lost context.CancelFunc) {
	t := time.NewTicker(e.settings().RenewInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := e.renew(ctx, l)
		if err == nil && e.follow(ctx) {
			// The TTL changed under this term: renew by the new one from
			// now on, and stop writing by the time the last renewal could
			// have expired under it.
			t.Reset(e.settings().RenewInterval())
			l.validUntil.Store(min(l.validUntil.Load(), l.renewed.Add(e.margin()).UnixNano()))
		}
		switch {
		case err == nil:
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			e.em.Emit(&sluicev1.Event{Kind: contract.KindLeader, Id: Component, Type: contract.EventLeadershipLost,
				Reason: "the lease was taken or expired: " + err.Error()})
			lost()
			return
		default:
			if !l.valid(e.cfg.Now()) {
				e.em.Emit(&sluicev1.Event{Kind: contract.KindLeader, Id: Component, Type: contract.EventLeadershipLost,
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
		e.em.Emit(&sluicev1.Event{Kind: contract.KindLeader, Id: Component, Type: contract.EventLeadershipReleased,
			Reason: fmt.Sprintf("instance %s gave the coordinator lease up at the end of term %d", e.cfg.Instance, l.epoch)})
	}
}
