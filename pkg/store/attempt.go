package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/backoff"
)

// AttemptTimeout bounds one request to the server. NATS requests are
// at-most-once: a request in flight when the server restarts, or when the
// client reconnects, is never answered, and without a bound the caller waits
// for its whole context (forever for a service's own context). A read that
// gets no answer within AttemptTimeout is asked again while ctx allows; a
// write is not (it may have landed: the caller sees the timeout and re-reads).
var AttemptTimeout = 5 * time.Second

// attempt is ctx bounded by AttemptTimeout, unless ctx ends sooner: then
// ctx itself, with nothing to release (no context of its own per write).
func attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= AttemptTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, AttemptTimeout)
}

// Unanswered says whether err is a request that got no answer in time (or no
// responder, as while JetStream starts): worth asking again.
func Unanswered(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false // the caller's own deadline or cancel
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoHeartbeat)
}

// read runs an idempotent request, asking again after an unanswered attempt
// until ctx ends.
func read[R any](ctx context.Context, f func(context.Context) (R, error)) (R, error) {
	for n := 0; ; n++ {
		actx, cancel := attempt(ctx)
		r, err := f(actx)
		cancel()
		if err == nil || !Unanswered(ctx, err) {
			return r, err
		}
		if werr := retryPause(ctx, n); werr != nil {
			return r, err
		}
	}
}

// retryPause waits a little longer after each unanswered attempt (50 ms,
// doubling, at most a second, jittered), so a restarting server is not
// hammered, nor by every reader at the same instant.
func retryPause(ctx context.Context, n int) error {
	return backoff.Sleep(ctx, unansweredRetry.Delay(n), nil)
}

// unansweredRetry: 50 ms to 1 s: the unanswered attempt already waited; a server restarts or elects within seconds.
var unansweredRetry = backoff.Policy{Base: 50 * time.Millisecond, Cap: time.Second}

// watchdog cancels a context unless kicked within AttemptTimeout: a watcher
// whose consumer was never created, or that stopped delivering before it
// caught up, is abandoned instead of waited on forever.
type watchdog struct {
	t      *time.Timer
	cancel context.CancelFunc
	once   sync.Once
	fired  chan struct{}
}

func newWatchdog(ctx context.Context) (context.Context, *watchdog) {
	wctx, cancel := context.WithCancel(ctx)
	w := &watchdog{cancel: cancel, fired: make(chan struct{})}
	w.t = time.AfterFunc(AttemptTimeout, func() {
		w.once.Do(func() { close(w.fired) })
		cancel()
	})
	return wctx, w
}

// kick restarts the countdown.
func (w *watchdog) kick() { w.t.Reset(AttemptTimeout) }

// disarm stops the countdown; the context lives on until stop.
func (w *watchdog) disarm() { w.t.Stop() }

// stop cancels the context.
func (w *watchdog) stop() { w.t.Stop(); w.cancel() }

// timedOut says whether the watchdog fired.
func (w *watchdog) timedOut() bool {
	select {
	case <-w.fired:
		return true
	default:
		return false
	}
}
