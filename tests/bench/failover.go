package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// Instance names of the failover scenario's two coordinators.
const (
	failoverLeader  = "bench-leader"
	failoverStandby = "bench-standby"
)

// coordinatorProc is a coordinator running in this process on its own NATS
// connection, so that it can be stopped on its own or killed like a crash.
type coordinatorProc struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

func startCoordinator(ctx context.Context, url string, settings contract.Settings, instance string, log zerolog.Logger) (*coordinatorProc, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.Name(instance))
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

// failoverScenario rolls out a third revision with two coordinators, a
// leader and a standby, and kills the leader once half of the nodes have
// been written their desired config. It measures the takeover from the
// kill: takeover_ms to the first desired config written in the new term
// (its writtenAt) — the moment the fleet sees the new leader act — and, to
// say where that time goes, takeover_lease_left_ms (the dead leader's lease
// had that long to live: last renewal + lease − kill), takeover_expired_ms
// (the server expired it) and takeover_acquired_ms (the standby acquired
// it: the lease's acquiredAt). The rollout must still end Succeeded.
func failoverScenario(ctx context.Context, url string, nc *nats.Conn, b *contract.Buckets, settings contract.Settings, o Options, res *Result) error {
	res.TakeoverLeaseMS = settings.LeaderLease.Milliseconds()
	leases := store.New(b.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	leader, err := startCoordinator(ctx, url, settings, failoverLeader, o.Log)
	if err != nil {
		return err
	}
	defer leader.stop()
	// Leading means the term's epoch is published in the lease (announce).
	var term *sluicev1.LeaderLease
	if err := waitFor(ctx, time.Minute+2*settings.LeaderLease, func() (bool, error) {
		e, err := leases.Get(ctx, contract.LeaseCoordinator)
		if err != nil {
			return false, nil
		}
		term = e.Value
		return term.GetHolder() == failoverLeader && term.GetEpoch() != 0, nil
	}); err != nil {
		return fmt.Errorf("waiting for %s to lead: %w", failoverLeader, err)
	}
	standby, err := startCoordinator(ctx, url, settings, failoverStandby, o.Log)
	if err != nil {
		return err
	}
	defer standby.stop()

	// The republished desired writes say how far the rollout got.
	half := int64(max(1, o.Nodes/2))
	var written atomic.Int64
	midway := make(chan struct{})
	sub, err := nc.Subscribe(contract.NodeConfigSubjectPrefix+".>", func(m *nats.Msg) {
		if strings.HasSuffix(m.Subject, ".desired") && written.Add(1) == half {
			close(midway)
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return err
	}
	in := append(Intents(), &sluicev1.Intent{Name: "bench-failover", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 300}}})
	resp, err := apiclient.Apply(ctx, nc, &sluicev1.ApplyRequest{Intents: in, Source: "bench",
		Strategy: &sluicev1.Strategy{MaxParallel: strconv.Itoa(o.MaxParallel)}})
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	id := contract.RolloutID(resp.GetGeneration(), resp.GetRevision())
	select {
	case <-midway:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("rollout %s: %d of %d desired configs written in 5m, want half", id, written.Load(), o.Nodes)
	case <-ctx.Done():
		return ctx.Err()
	}
	killedAt := time.Now()
	leader.kill()
	// A crash deletes nothing: the lease must still name the dead leader,
	// or the figure would measure a clean handover instead of an expiry.
	held, err := leases.Get(ctx, contract.LeaseCoordinator)
	if err != nil || held.Value.GetHolder() != failoverLeader {
		return fmt.Errorf("right after the kill the lease is %v (%v), want still held by %s: the crash was not simulated", held.Value, err, failoverLeader)
	}
	res.TakeoverLeaseLeftMS = ms(held.Value.GetRenewedAt().AsTime().Add(settings.LeaderLease).Sub(killedAt))
	// When the server expires the lease (the key is gone, or already
	// someone else's if the standby was quicker than this poll).
	if err := waitFor(ctx, time.Minute+2*settings.LeaderLease, func() (bool, error) {
		e, err := leases.Get(ctx, contract.LeaseCoordinator)
		return errors.Is(err, store.ErrNotFound) || (err == nil && e.Value.GetHolder() != failoverLeader), nil
	}); err != nil {
		return fmt.Errorf("waiting for the dead leader's lease to expire: %w", err)
	}
	res.TakeoverExpiredMS = ms(time.Since(killedAt))

	rollouts := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var final *sluicev1.Rollout
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		r, err := rollouts.Get(ctx, id)
		if err != nil {
			return false, nil
		}
		final = r.Value
		return contract.Terminal(final.GetPhase()), nil
	}); err != nil {
		return fmt.Errorf("waiting for rollout %s to end after the takeover: %w", id, err)
	}
	res.FailoverPhase = final.GetPhase().String()
	if final.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		return fmt.Errorf("rollout %s ended %s after the takeover: %s", id, final.GetPhase(), final.GetReason())
	}
	cur, err := leases.Get(ctx, contract.LeaseCoordinator)
	if err != nil {
		return fmt.Errorf("read the lease after the takeover: %w", err)
	}
	if cur.Value.GetHolder() != failoverStandby || cur.Value.GetEpoch() <= term.GetEpoch() {
		return fmt.Errorf("after the takeover the lease is %v, want %s in a term after %d", cur.Value, failoverStandby, term.GetEpoch())
	}
	res.TakeoverAcquiredMS = ms(cur.Value.GetAcquiredAt().AsTime().Sub(killedAt))

	desired, err := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, "*.desired")
	if err != nil {
		return err
	}
	var first time.Time
	for _, d := range desired {
		if d.Err != nil || d.Value.GetRollout() != id || d.Value.GetLeaderEpoch() != cur.Value.GetEpoch() {
			continue
		}
		res.FailoverNewTermNodes++
		if t := d.Value.GetWrittenAt().AsTime(); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	if first.IsZero() {
		return errors.New("the new leader wrote no desired config: the rollout ended before the kill")
	}
	res.TakeoverMS = ms(first.Sub(killedAt))
	res.TakeoverLeaseRatio = math.Round(res.TakeoverMS/float64(res.TakeoverLeaseMS)*1000) / 1000
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
