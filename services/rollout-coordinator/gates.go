package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/gate"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// gateRunner performs the decider's WatchGates: one goroutine per gate
// check, measuring against Prometheus (each request bounded by timeout)
// and handing every measurement to the loop as a GateMeasured event. A
// check runs until a WatchGates no longer lists it or the term ends; it
// never decides: a failed request is reported (the decider waits) and
// tried again with backoff.
type gateRunner struct {
	client  gate.Client
	timeout time.Duration
	now     func() time.Time
	log     zerolog.Logger
	out     chan rollout.GateMeasured
	running map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func newGateRunner(client gate.Client, timeout time.Duration, now func() time.Time, log zerolog.Logger) *gateRunner {
	return &gateRunner{client: client, timeout: timeout, now: now, log: log, out: make(chan rollout.GateMeasured, 16), running: map[string]context.CancelFunc{}}
}

// set starts the checks w lists that are not running and stops the rest.
func (g *gateRunner) set(ctx context.Context, w rollout.WatchGates) {
	want := map[string]rollout.GateCheck{}
	for _, c := range w.Checks {
		want[w.Rollout+"|"+c.Gate.Name+"|"+c.Before] = c
	}
	for k, cancel := range g.running {
		if _, ok := want[k]; !ok {
			cancel()
			delete(g.running, k)
		}
	}
	for k, c := range want {
		if _, ok := g.running[k]; ok {
			continue
		}
		cctx, cancel := context.WithCancel(ctx)
		g.running[k] = cancel
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.run(cctx, w.Rollout, c)
		}()
	}
}

// stop ends every check and waits for them; safe twice.
func (g *gateRunner) stop() {
	for k, cancel := range g.running {
		cancel()
		delete(g.running, k)
	}
	g.wg.Wait()
}

// run measures c until ctx ends: again after a failed request with
// backoff (1s doubling to 30s, jittered), otherwise after the alert gate's
// interval, or the metric gate's step (1s to 30s: new values arrive with it).
func (g *gateRunner) run(ctx context.Context, rolloutID string, c rollout.GateCheck) {
	b := backoff.New(backoff.Policy{Base: time.Second, Cap: 30 * time.Second})
	log := g.log.With().Str(logging.FieldRollout, rolloutID).Str("gate", c.Gate.Name).Logger()
	for {
		ev := rollout.GateMeasured{Rollout: rolloutID, Gate: c.Gate.Name, Before: c.Before}
		qctx, cancel := context.WithTimeout(ctx, g.timeout)
		var err error
		if c.Gate.IsAlert() {
			ev.Firing, err = g.client.Firing(qctx, c.Gate)
		} else {
			var m gate.Measurement
			m, err = g.client.Measure(qctx, c.Gate, g.now())
			ev.Samples, ev.Max, ev.Min = m.Samples, m.Max, m.Min
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		next := c.Gate.Interval
		if !c.Gate.IsAlert() {
			next = min(max(c.Gate.Step, time.Second), 30*time.Second)
		}
		if err != nil {
			ev.Err = err.Error()
			next = b.Next()
			log.Debug().Err(err).Dur("retry_in", next).Msg("gate measurement failed")
		} else {
			b.Reset()
		}
		select {
		case g.out <- ev:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(next)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}
