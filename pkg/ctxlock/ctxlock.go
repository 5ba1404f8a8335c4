// Package ctxlock is a mutual-exclusion lock whose Lock gives up when its
// context ends: a request waiting behind a long change stops waiting at its
// own deadline instead of past it.
//
// It is a channel, so a goroutine waiting for it is, to Go's
// testing/synctest, durably blocked: the chaos suite runs the services on
// virtual time, whose clock moves only while every goroutine waits on a
// channel or a timer, and a sync.Mutex held across a backoff would stop it.
package ctxlock

import "context"

// Mutex is a lock; make one with New. Not reentrant.
type Mutex struct{ ch chan struct{} }

// New returns an unlocked Mutex.
func New() *Mutex { return &Mutex{ch: make(chan struct{}, 1)} }

// Lock takes the lock, or returns ctx's error if ctx ends first (the lock
// is then not held).
func (m *Mutex) Lock(ctx context.Context) error {
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock releases the lock. Unlocking a Mutex that is not locked panics.
func (m *Mutex) Unlock() {
	select {
	case <-m.ch:
	default:
		panic("ctxlock: unlock of an unlocked Mutex")
	}
}
