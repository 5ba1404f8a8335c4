// Package backoff is the one retry delay of the project: exponential from a
// base to a cap, with jitter, so that a control plane under load is offered
// less work, not more, and clients that failed together do not come back
// together. Every retry loop in sluice takes its delay from here; each
// names its base and cap where it builds its Policy.
//
// Policy.Delay(n) is the delay before retry n (0: the first retry); a
// Backoff counts the retries of one loop (Next, Reset, Wait). Rand and
// After are injectable, so that tests are deterministic.
package backoff

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Jitter says how a delay d is spread.
type Jitter uint8

const (
	// Equal waits d/2 plus a uniform share of d/2: at least half the
	// delay, so a retry never comes at once. The default.
	Equal Jitter = iota
	// Full waits a uniform share of d, from 0: the widest spread, for
	// writers contending for one key (AWS's "full jitter").
	Full
)

// Policy is a sequence of retry delays: Base, doubling, at most Cap
// (before jitter).
type Policy struct {
	Base   time.Duration // the first delay, before jitter; at least 1ns
	Cap    time.Duration // the longest delay, before jitter; Base if smaller
	Jitter Jitter
	// Rand returns a number in [0, 1); nil is math/rand/v2's Float64.
	Rand func() float64
	// After is the clock Wait sleeps on; nil is a timer.
	After func(time.Duration) <-chan time.Time
}

// Ceiling is the delay before retry n without jitter: Base·2ⁿ, at most Cap.
func (p Policy) Ceiling(n int) time.Duration {
	d, hi := max(p.Base, 1), max(p.Cap, p.Base, 1)
	for i := 0; i < n && d < hi; i++ {
		if d > hi/2 {
			return hi // doubling would pass the cap (or overflow)
		}
		d *= 2
	}
	return min(d, hi)
}

// Delay is the delay before retry n (0: the first retry), jittered.
func (p Policy) Delay(n int) time.Duration {
	d := p.Ceiling(n)
	r := rand.Float64
	if p.Rand != nil {
		r = p.Rand
	}
	x := min(max(r(), 0), 1)
	if p.Jitter == Full {
		return share(x, d)
	}
	return d/2 + share(x, d-d/2)
}

// share is x·d for x in [0, 1], never above d (a float near 2⁶³ would
// overflow the conversion back).
func share(x float64, d time.Duration) time.Duration {
	if f := x * float64(d); f < float64(d) {
		return time.Duration(f)
	}
	return d
}

// Backoff counts the retries of one loop. It is safe for concurrent use:
// callers on several goroutines share one sequence.
type Backoff struct {
	p  Policy
	mu sync.Mutex
	n  int
}

// New returns a Backoff at its first retry.
func New(p Policy) *Backoff { return &Backoff{p: p} }

// Next is the delay before the next retry; the one after it is longer,
// up to the cap.
func (b *Backoff) Next() time.Duration {
	b.mu.Lock()
	n := b.n
	if b.p.Ceiling(n) < max(b.p.Cap, b.p.Base) {
		b.n++ // not past the cap: the count stays small
	}
	b.mu.Unlock()
	return b.p.Delay(n)
}

// Reset starts the sequence again: call it once an attempt succeeded.
func (b *Backoff) Reset() {
	b.mu.Lock()
	b.n = 0
	b.mu.Unlock()
}

// Wait sleeps the next delay (Next), or until ctx ends: then it returns
// ctx's error.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next(), b.p.After)
}

// Sleep waits d, or until ctx ends (returning its error), on after (nil:
// a timer, stopped when ctx ends first).
func Sleep(ctx context.Context, d time.Duration, after func(time.Duration) <-chan time.Time) error {
	if after != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-after(d):
			return nil
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Spread returns d moved by a uniform share of up to frac of it either way
// (frac 0.1: 0.9d to 1.1d), for periodic work that must not run in step
// across a fleet started together; the mean stays d. r returns a number in
// [0, 1) (nil: math/rand/v2's Float64).
func Spread(d time.Duration, frac float64, r func() float64) time.Duration {
	if r == nil {
		r = rand.Float64
	}
	x := min(max(r(), 0), 1)
	return d + time.Duration((2*x-1)*frac*float64(d))
}
