package store

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
)

// ViewWait bounds how long View.List waits for its watch to deliver the
// writes the stream holds when List is called; past it List reads the
// bucket as Store.List does. A watch delivers within milliseconds; the
// bound is for a stream whose last message expired unseen.
var ViewWait = time.Second

// A View is a bucket's current values kept by one watch, for a reader that
// asks the same question of every key on every request: the configurator
// verifies an apply on the whole fleet's presence. Listing the bucket costs
// a message and a decode per key per request (100,000 at 100,000 nodes,
// on the path from an apply to its rollout's start); a View costs one
// decode per write, none per request but a stream-info request.
//
// List answers as Store.List would at the instant it is called: it asks
// the stream's leader for its last sequence and waits until the watch has
// delivered it (read-your-writes, on a cluster too). A View that is not
// caught up within ViewWait, not started, between watches, or whose bucket
// was deleted and made again answers by listing the bucket until the
// listing holds that last sequence: a view can be slower than a listing,
// never staler.
//
// slim, when set, keeps only what readers use of each value (interning
// repeated parts), so that a View of 300,000 presences stays small; it
// must return a value that no reader mutates.
type View[T proto.Message] struct {
	s    *Store[T]
	slim func(T) T

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every delivery
	entries map[string]Entry[T]
	seen    uint64    // the highest revision delivered
	ready   bool      // entries hold the watch's initial values
	created time.Time // the stream's creation when the watch began
	stop    func()    // ends the current watch

	fromView, listed atomic.Uint64 // List's answers, by where they came from
}

// NewView returns a View over s; Run feeds it.
func NewView[T proto.Message](s *Store[T], slim func(T) T) *View[T] {
	return &View[T]{s: s, slim: slim, changed: make(chan struct{})}
}

// viewRetry paces the View's watches after one ended or failed.
var viewRetry = backoff.Policy{Base: 100 * time.Millisecond, Cap: 10 * time.Second}

// Run keeps the View until ctx ends, watching again (backing off) when a
// watch ends or cannot start. Meanwhile List lists the bucket.
func (v *View[T]) Run(ctx context.Context) {
	b := backoff.New(viewRetry)
	for ctx.Err() == nil {
		if v.follow(ctx) {
			b.Reset()
		}
		v.reset()
		if b.Wait(ctx) != nil {
			return
		}
	}
}

// follow runs one watch; it reports whether it delivered its initial values.
func (v *View[T]) follow(ctx context.Context) bool {
	created, _, err := v.stream(ctx)
	if err != nil {
		return false
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	v.mu.Lock()
	v.stop = cancel
	v.mu.Unlock()
	ch, err := v.s.Watch(wctx, ">")
	if err != nil {
		return false
	}
	next := map[string]Entry[T]{}
	caughtUp := false
	for e := range ch {
		if e.Key == "" && e.Revision == 0 { // initial values delivered
			v.mu.Lock()
			v.entries, v.ready, v.created, caughtUp = next, true, created, true
			v.mu.Unlock()
			continue
		}
		if e.Err == nil && !e.Deleted && v.slim != nil {
			e.Value = v.slim(e.Value)
		}
		v.mu.Lock()
		if e.Deleted { // next is v.entries once caught up
			delete(next, e.Key)
		} else {
			next[e.Key] = e
		}
		v.seen = max(v.seen, e.Revision)
		close(v.changed)
		v.changed = make(chan struct{})
		v.mu.Unlock()
	}
	return caughtUp
}

func (v *View[T]) reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.entries, v.ready, v.seen, v.stop = nil, false, 0, nil
}

// stream is the bucket's stream's creation time and last sequence, as its
// leader answers.
func (v *View[T]) stream(ctx context.Context) (time.Time, uint64, error) {
	st, err := read(ctx, v.s.kv.Status)
	if err != nil {
		return time.Time{}, 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return time.Time{}, 0, errNoStreamInfo
	}
	info := bs.StreamInfo()
	return info.Created, info.State.LastSeq, nil
}

// List is Store.List(ctx, ">") from the View, sorted by key: the values
// undeleted at the instant of the call, one that does not decode with Err
// set. See View for when it lists the bucket instead.
func (v *View[T]) List(ctx context.Context) ([]Entry[T], error) {
	out, last, ok := v.current(ctx)
	if ok {
		v.fromView.Add(1)
		return out, nil
	}
	v.listed.Add(1)
	// A listing that reaches the stream's last sequence when List was
	// called, as the watch would have.
	out, err := v.s.listFrom(ctx, ">", last)
	out = slices.DeleteFunc(out, func(e Entry[T]) bool { return e.Deleted })
	slices.SortFunc(out, func(a, b Entry[T]) int { return cmp.Compare(a.Key, b.Key) })
	return out, err
}

// Answers is how many List calls the watch answered and how many listed
// the bucket.
func (v *View[T]) Answers() (fromView, listed uint64) { return v.fromView.Load(), v.listed.Load() }

// current is the View's entries once its watch has delivered every write
// the stream held when it was called (its last sequence, last); false if
// that is not so within ViewWait.
func (v *View[T]) current(ctx context.Context) (_ []Entry[T], last uint64, _ bool) {
	created, last, err := v.stream(ctx)
	if err != nil {
		return nil, 0, false
	}
	wait := time.NewTimer(ViewWait)
	defer wait.Stop()
	for {
		v.mu.Lock()
		if v.ready && !v.created.Equal(created) {
			// The bucket was made again since the watch began: what the
			// watch holds is another stream's. Watch the new one.
			v.ready = false
			v.stop()
			v.mu.Unlock()
			return nil, last, false
		}
		if v.ready && v.seen >= last {
			out := make([]Entry[T], 0, len(v.entries))
			for _, e := range v.entries {
				out = append(out, e)
			}
			v.mu.Unlock()
			slices.SortFunc(out, func(a, b Entry[T]) int { return cmp.Compare(a.Key, b.Key) })
			return out, last, true
		}
		changed := v.changed
		v.mu.Unlock()
		select {
		case <-changed:
		case <-wait.C:
			return nil, last, false
		case <-ctx.Done():
			return nil, last, false
		}
	}
}
