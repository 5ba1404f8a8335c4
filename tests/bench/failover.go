package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// Instance names of the failover scenario's coordinators: the leader that
// is killed, the standby that takes over and is then stopped cleanly, and
// the successor that takes over from it (and is paused after).
const (
	failoverLeader    = "bench-leader"
	failoverStandby   = "bench-standby"
	failoverSuccessor = "bench-successor"
)

// coordinatorProc is a coordinator running in this process on its own NATS
// connection, so that it can be stopped on its own or killed like a crash.
type coordinatorProc struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func startCoordinator(ctx context.Context, url string, settings contract.Settings, instance string, log zerolog.Logger) (*coordinatorProc, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.Name(compCoordinator+"-"+instance))
	if err != nil {
		return nil, fmt.Errorf("coordinator %s: connect: %w", instance, err)
	}
	c, err := coordinator.New(coordinator.Config{Conn: nc, Settings: settings, Log: log, Instance: instance})
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &coordinatorProc{nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error().Err(err).Str("instance", instance).Msg("coordinator stopped")
		}
	}()
	return p, nil
}

// stop shuts the coordinator down as SIGTERM does: its term ends and it
// releases the lease. Safe after kill.
func (p *coordinatorProc) stop() {
	p.cancel()
	<-p.done
	p.nc.Close()
}

// kill makes the coordinator look crashed to everyone else: its connection
// drops first, so nothing it tries afterwards reaches the server — in
// particular not the release of its lease, which a dead process never
// deletes. The lease must expire. It does not wait for the goroutines to
// return (stop does).
func (p *coordinatorProc) kill() {
	p.nc.Close()
	p.cancel()
}

// Process makes an in-process coordinator usable where a child would be;
// it cannot be paused.
func (p *coordinatorProc) Stop() (float64, error) { p.stop(); return -1, nil }

// CPU: an in-process coordinator's time is the bench process's.
func (p *coordinatorProc) CPU() (time.Duration, bool) { return 0, false }

func (p *coordinatorProc) Pause(context.Context, time.Duration) error {
	return errors.New("a coordinator in the bench's process cannot be paused on its own")
}

// failover holds what the failover scenario's phases share.
type failover struct {
	url      string
	nc       *nats.Conn
	b        *buckets.Set
	settings contract.Settings
	o        Options
	leases   *store.Store[*sluicev1.LeaderLease]
}

// failoverScenario runs three phases, each from the leader the one before
// left: the leader is killed mid-rollout and the standby takes over
// (takeover_ms); that leader is stopped cleanly mid-rollout and a successor
// takes over (clean_takeover_ms); then, with --pauses, the successor's
// process is paused while a standby watches (false_takeovers).
func failoverScenario(ctx context.Context, url string, nc *nats.Conn, b *buckets.Set, settings contract.Settings, o Options, res *Result) error {
	f := &failover{url: url, nc: nc, b: b, settings: settings, o: o,
		leases: store.New(b.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })}
	res.TakeoverLeaseMS = settings.LeaderLease.Milliseconds()
	leader, err := startCoordinator(ctx, url, settings, failoverLeader, o.Log)
	if err != nil {
		return err
	}
	defer leader.stop()
	term, err := f.leading(ctx, failoverLeader)
	if err != nil {
		return err
	}
	standby, err := startCoordinator(ctx, url, settings, failoverStandby, o.Log)
	if err != nil {
		return err
	}
	defer standby.stop()
	if err := f.kill(ctx, leader, term, res); err != nil {
		return err
	}

	// The successor is a child process when the bench can start one: the
	// pause phase must stop its process on its own.
	var successor Process
	if o.StartCoordinator != nil {
		successor, err = o.StartCoordinator(CoordinatorSpec{URL: url, Instance: failoverSuccessor,
			LeaderLease: settings.LeaderLease, NodeLease: settings.NodeLease})
	} else {
		successor, err = startCoordinator(ctx, url, settings, failoverSuccessor, o.Log)
	}
	if err != nil {
		return err
	}
	defer func() { _, _ = successor.Stop() }()
	if err := f.cleanStop(ctx, standby, res); err != nil {
		return fmt.Errorf("clean stop: %w", err)
	}
	if o.Pauses > 0 {
		if err := f.pauses(ctx, successor, res); err != nil {
			return fmt.Errorf("pauses: %w", err)
		}
	}
	if _, err := successor.Stop(); err != nil {
		return fmt.Errorf("stop %s: %w", failoverSuccessor, err)
	}
	return nil
}

// kill rolls out a third revision and kills the leader once half of the
// nodes have been written their desired config. It measures the takeover
// from the kill: takeover_ms to the first desired config written in the new
// term (its writtenAt) — the moment the fleet sees the new leader act — and,
// to say where that time goes, takeover_lease_left_ms (the dead leader's
// lease had that long to live: last renewal + lease − kill),
// takeover_expired_ms (the server expired it) and takeover_acquired_ms (the
// standby acquired it: the lease's acquiredAt). The rollout must still end
// Succeeded.
func (f *failover) kill(ctx context.Context, leader *coordinatorProc, term *sluicev1.LeaderLease, res *Result) error {
	id, err := f.rollHalf(ctx, 300)
	if err != nil {
		return err
	}
	killedAt := time.Now()
	leader.kill()
	// A crash deletes nothing: the lease must still name the dead leader,
	// or the figure would measure a clean handover instead of an expiry.
	held, err := f.leases.Get(ctx, contract.LeaseCoordinator)
	if err != nil || held.Value.GetHolder() != failoverLeader {
		return fmt.Errorf("right after the kill the lease is %v (%v), want still held by %s: the crash was not simulated", held.Value, err, failoverLeader)
	}
	res.TakeoverLeaseLeftMS = ms(held.Value.GetRenewedAt().AsTime().Add(f.settings.LeaderLease).Sub(killedAt))
	// When the server expires the lease (the key is gone, or already
	// someone else's if the standby was quicker than this poll).
	if err := waitFor(ctx, time.Minute+2*f.settings.LeaderLease, func() (bool, error) {
		e, err := f.leases.Get(ctx, contract.LeaseCoordinator)
		return errors.Is(err, store.ErrNotFound) || (err == nil && e.Value.GetHolder() != failoverLeader), nil
	}); err != nil {
		return fmt.Errorf("waiting for the dead leader's lease to expire: %w", err)
	}
	res.TakeoverExpiredMS = ms(time.Since(killedAt))
	if res.FailoverPhase, err = f.succeeded(ctx, id); err != nil {
		return err
	}
	cur, err := f.taken(ctx, failoverStandby, term)
	if err != nil {
		return err
	}
	res.TakeoverAcquiredMS = ms(cur.GetAcquiredAt().AsTime().Sub(killedAt))
	first, n, err := f.firstWrite(ctx, id, cur.GetEpoch())
	if err != nil {
		return err
	}
	res.FailoverNewTermNodes = n
	res.TakeoverMS = ms(first.Sub(killedAt))
	res.TakeoverLeaseRatio = math.Round(res.TakeoverMS/float64(res.TakeoverLeaseMS)*1000) / 1000
	return nil
}

// cleanStop rolls out a fourth revision and, when half of the nodes are
// written, stops the leader the way SIGTERM does: its term ends and it
// releases the lease, so the successor standing by need not wait for an
// expiry. clean_takeover_ms runs from the stop to the first desired config
// the successor writes (the same definition as takeover_ms); on the way,
// clean_takeover_released_ms (the lease no longer names the leader: the
// bench polls the key) and clean_takeover_acquired_ms (the successor
// acquired it: the lease's acquiredAt).
func (f *failover) cleanStop(ctx context.Context, leader *coordinatorProc, res *Result) error {
	term, err := f.leading(ctx, failoverStandby)
	if err != nil {
		return err
	}
	if err := waitStandingBy(ctx, f.nc, failoverSuccessor); err != nil {
		return err
	}
	id, err := f.rollHalf(ctx, 400)
	if err != nil {
		return err
	}
	stoppedAt := time.Now()
	released := make(chan time.Time, 1)
	go func() {
		err := waitFor(ctx, time.Minute, func() (bool, error) {
			e, err := f.leases.Get(ctx, contract.LeaseCoordinator)
			return errors.Is(err, store.ErrNotFound) || (err == nil && e.Value.GetHolder() != failoverStandby), nil
		})
		if err != nil {
			released <- time.Time{}
			return
		}
		released <- time.Now()
	}()
	leader.stop()
	// A clean stop releases the lease: it must no longer name the leader.
	if held, err := f.leases.Get(ctx, contract.LeaseCoordinator); err == nil && held.Value.GetHolder() == failoverStandby {
		return fmt.Errorf("after the stop the lease is still %s's (term %d): it was not released", failoverStandby, held.Value.GetEpoch())
	}
	if at := <-released; !at.IsZero() {
		res.CleanTakeoverReleasedMS = ms(at.Sub(stoppedAt))
	}
	if _, err := f.succeeded(ctx, id); err != nil {
		return err
	}
	cur, err := f.taken(ctx, failoverSuccessor, term)
	if err != nil {
		return err
	}
	res.CleanTakeoverAcquiredMS = ms(cur.GetAcquiredAt().AsTime().Sub(stoppedAt))
	first, _, err := f.firstWrite(ctx, id, cur.GetEpoch())
	if err != nil {
		return err
	}
	res.CleanTakeoverMS = ms(first.Sub(stoppedAt))
	return nil
}

// leading waits until instance leads: its term's epoch is published in the
// lease (announce).
func (f *failover) leading(ctx context.Context, instance string) (*sluicev1.LeaderLease, error) {
	var term *sluicev1.LeaderLease
	if err := waitFor(ctx, time.Minute+2*f.settings.LeaderLease, func() (bool, error) {
		e, err := f.leases.Get(ctx, contract.LeaseCoordinator)
		if err != nil {
			return false, nil
		}
		term = e.Value
		return term.GetHolder() == instance && term.GetEpoch() != 0, nil
	}); err != nil {
		return nil, fmt.Errorf("waiting for %s to lead: %w", instance, err)
	}
	return term, nil
}

// taken reads the lease after a takeover: instance must hold it in a term
// after the one before.
func (f *failover) taken(ctx context.Context, instance string, before *sluicev1.LeaderLease) (*sluicev1.LeaderLease, error) {
	cur, err := f.leases.Get(ctx, contract.LeaseCoordinator)
	if err != nil {
		return nil, fmt.Errorf("read the lease after the takeover: %w", err)
	}
	if cur.Value.GetHolder() != instance || cur.Value.GetEpoch() <= before.GetEpoch() {
		return nil, fmt.Errorf("after the takeover the lease is %v, want %s in a term after %d", cur.Value, instance, before.GetEpoch())
	}
	return cur.Value, nil
}

// rollHalf applies the benchmark's intents with one more table (so every
// node gets a new desired config) and returns once half of the nodes'
// desired configs have been republished.
func (f *failover) rollHalf(ctx context.Context, table uint32) (rollout string, err error) {
	half := int64(max(1, f.o.Nodes/2))
	var written atomic.Int64
	midway := make(chan struct{})
	sub, err := f.nc.Subscribe(contract.NodeConfigSubjectPrefix+".>", func(m *nats.Msg) {
		if strings.HasSuffix(m.Subject, ".desired") && written.Add(1) == half {
			close(midway)
		}
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := f.nc.Flush(); err != nil {
		return "", err
	}
	in := append(Intents(), &sluicev1.Intent{Name: fmt.Sprintf("bench-failover-%d", table),
		Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: table}}})
	resp, err := apiclient.Apply(ctx, f.nc, &sluicev1.ApplyRequest{Intents: in, Source: "bench",
		Strategy: &sluicev1.Strategy{MaxParallel: strconv.Itoa(f.o.MaxParallel)}})
	if err != nil {
		return "", fmt.Errorf("apply: %w", err)
	}
	id := contract.RolloutID(resp.GetGeneration(), resp.GetRevision())
	t := time.NewTimer(5 * time.Minute)
	defer t.Stop()
	select {
	case <-midway:
		return id, nil
	case <-t.C:
		return "", fmt.Errorf("rollout %s: %d of %d desired configs written in 5m, want half", id, written.Load(), f.o.Nodes)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// succeeded waits for rollout id to end and returns its phase, with an
// error unless it Succeeded.
func (f *failover) succeeded(ctx context.Context, id string) (string, error) {
	rollouts := store.New(f.b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var final *sluicev1.Rollout
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		r, err := rollouts.Get(ctx, id)
		if err != nil {
			return false, nil
		}
		final = r.Value
		return contract.Terminal(final.GetPhase()), nil
	}); err != nil {
		return "", fmt.Errorf("waiting for rollout %s to end after the takeover: %w", id, err)
	}
	phase := final.GetPhase().String()
	if final.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		return phase, fmt.Errorf("rollout %s ended %s after the takeover: %s", id, phase, final.GetReason())
	}
	return phase, nil
}

// firstWrite finds the desired configs of rollout id written in the term
// epoch: the earliest writtenAt and how many.
func (f *failover) firstWrite(ctx context.Context, id string, epoch uint64) (first time.Time, n int, err error) {
	desired, err := store.New(f.b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, "*.desired")
	if err != nil {
		return first, 0, err
	}
	for _, d := range desired {
		if d.Err != nil || d.Value.GetRollout() != id || d.Value.GetLeaderEpoch() != epoch {
			continue
		}
		n++
		if t := d.Value.GetWrittenAt().AsTime(); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	if first.IsZero() {
		return first, 0, fmt.Errorf("the new leader (term %d) wrote no desired config of %s: the rollout ended before the leader went", epoch, id)
	}
	return first, n, nil
}

// waitStandingBy waits until the coordinator instance stands by: it has
// read the lease (and watches it), as its micro service's metadata says.
// Before that a takeover time would include its start.
func waitStandingBy(ctx context.Context, nc *nats.Conn, instance string) error {
	subject, err := micro.ControlSubject(micro.InfoVerb, contract.CoordinatorService, "")
	if err != nil {
		return err
	}
	err = waitFor(ctx, time.Minute, func() (bool, error) {
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return false, err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return false, err
		}
		for {
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				return false, nil // no (more) answers: ask again
			}
			var info micro.Info
			if json.Unmarshal(m.Data, &info) == nil && info.Metadata["instance"] == instance && info.Metadata["role"] == coordinator.RoleStandby {
				return true, nil
			}
		}
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to stand by: %w", instance, err)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
