// Package pause is the control plane's acknowledged pause, shared by every
// component: the requested pause lives in control/pause (and
// control/pause.<rollout> for one rollout), every instance announces the
// generation it has reached, and an operator's `sluice pause --wait` returns
// once every live instance has reached it.
//
// The rules (contract.NextAck, a pure function) live in contract; Gate
// counts the work of a service that is paused between requests (the
// configurator, the reaper); Beacon keeps a service instance's presence,
// with its acknowledgement, in the instances bucket; Follow watches the
// requested pause. Agents announce theirs in their node presence instead.
package pause

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Get reads the request in control/key: nil when nothing was ever paused there.
func Get(ctx context.Context, st *store.Store[*sluicev1.PauseRequest], key string) (*sluicev1.PauseRequest, error) {
	e, err := st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", contract.BucketControl, key, err)
	}
	return e.Value, nil
}

// Follow calls f with the request in control/pause now and with every
// change (nil when deleted) until ctx ends, watching again after an error.
// A value that does not decode is skipped with a call to bad.
func Follow(ctx context.Context, st *store.Store[*sluicev1.PauseRequest], f func(*sluicev1.PauseRequest), bad func(error)) {
	retry := backoff.New(followRetry)
	for ctx.Err() == nil {
		w, err := st.Watch(ctx, contract.KeyPause)
		if err != nil {
			bad(err)
			sleep(ctx, retry.Next())
			continue
		}
		retry.Reset()
		for e := range w {
			switch {
			case e.Key == "":
				// caught up
			case e.Err != nil:
				bad(e.Err)
			case e.Deleted:
				f(nil)
			default:
				f(e.Value)
			}
		}
		sleep(ctx, retry.Next()) // the watcher stopped: watch again, not in a tight loop
	}
}

// followRetry: 1 s to 5 s: a pause must be seen soon after JetStream answers again, without a tight loop while it does not.
var followRetry = backoff.Policy{Base: time.Second, Cap: 5 * time.Second}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Gate is the pause of a service that does its work in units (a request, a
// pass): Begin refuses to start one while paused, and the acknowledgement
// is reached once no unit runs. It is safe for concurrent use.
type Gate struct {
	mu    sync.Mutex
	req   *sluicev1.PauseRequest
	busy  int
	ack   *sluicev1.PauseAck
	what  string // names a unit in waiting_for ("request", "pass")
	now   func() time.Time
	onAck func(*sluicev1.PauseAck)
}

// NewGate returns a gate whose acknowledgement changes are handed to onAck
// (called with the gate's lock held: it must not call back into the gate).
func NewGate(what string, now func() time.Time, onAck func(*sluicev1.PauseAck)) *Gate {
	return &Gate{what: what, now: now, onAck: onAck}
}

// Set takes the request in force.
func (g *Gate) Set(req *sluicev1.PauseRequest) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if req.GetGeneration() < g.req.GetGeneration() {
		return
	}
	g.req = nil
	if req != nil {
		g.req = proto.Clone(req).(*sluicev1.PauseRequest)
	}
	g.update()
}

// Begin starts a unit of work, or returns the pause holding it back.
// end must be called once the unit finished. A nil gate (a service used
// without Run, in tests) never holds.
func (g *Gate) Begin() (end func(), held *sluicev1.PauseRequest) {
	if g == nil {
		return func() {}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.req.GetPaused() {
		return nil, proto.Clone(g.req).(*sluicev1.PauseRequest)
	}
	g.busy++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.busy--
			g.update()
		})
	}, nil
}

// Ack is the gate's acknowledgement now.
func (g *Gate) Ack() *sluicev1.PauseAck {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.update()
	return g.ack
}

func (g *Gate) update() {
	busy := ""
	if g.busy > 0 {
		busy = fmt.Sprintf("%d %s(s) in progress", g.busy, g.what)
	}
	next := contract.NextAck(g.ack, g.req, busy, g.now())
	if next == g.ack {
		return
	}
	g.ack = next
	if g.onAck != nil {
		g.onAck(next)
	}
}

// Event types of acknowledgements (kind instance, id <component>.<instance>).
const (
	EventPauseReached  = "PauseReached"  // the instance finished what it was doing and starts nothing new
	EventResumeReached = "ResumeReached" // the instance works again
)

// Announce logs and emits that the instance reached ack, unless ack
// reached nothing new since prev (it only waits for more, or was never
// paused): event PauseReached or ResumeReached, kind instance, id
// <component>.<instance>. Every component announces through it.
func Announce(log zerolog.Logger, emit func(*sluicev1.Event), component, instance string, prev, ack *sluicev1.PauseAck) {
	if ack.GetGeneration() == prev.GetGeneration() && ack.GetPaused() == prev.GetPaused() {
		return
	}
	if ack.GetGeneration() == 0 {
		return // never paused
	}
	typ, what := EventResumeReached, "works again"
	if ack.GetPaused() {
		typ, what = EventPauseReached, "has finished what it was doing and starts nothing new"
	}
	id := contract.InstanceKey(component, instance)
	ev := &sluicev1.Event{Kind: contract.KindInstance, Id: id, Type: typ,
		Reason: fmt.Sprintf("%s %s (pause generation %d)", id, what, ack.GetGeneration())}
	log.Info().Uint64("generation", ack.GetGeneration()).Bool("paused", ack.GetPaused()).
		Str(logging.FieldReason, ev.GetReason()).Msg("pause acknowledged")
	emit(ev)
}

// Service is what a service that pauses between units of work (the
// configurator, the reaper) needs: its buckets and names.
type Service struct {
	Control, Instances jetstream.KeyValue
	Component          string
	Instance           string
	Version            string
	What               string        // a unit of its work, for waiting_for ("request", "pass")
	Interval           time.Duration // presence renewal
	Log                zerolog.Logger
	Now                func() time.Time
	Emit               func(*sluicev1.Event)
	// Changed, if set, is called with every request seen (after the gate took it).
	Changed func(*sluicev1.PauseRequest)
}

// Start reads control/pause (so a paused control plane holds the first
// unit of work too), then follows it and keeps the instance's presence
// until stop is called; the gate's acknowledgements are announced in the
// presence, with an event and a log line each time a generation is reached.
func Start(ctx context.Context, c Service) (g *Gate, stop func()) {
	beacon := NewBeacon(c.Instances, c.Component, c.Instance, c.Version, c.Interval, c.Log, c.Now)
	var prev *sluicev1.PauseAck
	g = NewGate(c.What, c.Now, func(a *sluicev1.PauseAck) {
		beacon.Set(a, "")
		Announce(c.Log, c.Emit, c.Component, c.Instance, prev, a)
		prev = a
	})
	pauses := store.New(c.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	if r, err := Get(ctx, pauses, contract.KeyPause); err == nil {
		g.Set(r)
	} else if ctx.Err() == nil {
		c.Log.Warn().Err(err).Msg("read control/pause at start; following it")
	}
	beacon.Set(g.Ack(), "")
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { beacon.Run(pctx) })
	wg.Go(func() {
		Follow(pctx, pauses, func(r *sluicev1.PauseRequest) {
			g.Set(r)
			if c.Changed != nil {
				c.Changed(r)
			}
		}, func(err error) { c.Log.Warn().Err(err).Msg("watch control/pause; retrying") })
	})
	return g, func() {
		cancel()
		wg.Wait()
	}
}
