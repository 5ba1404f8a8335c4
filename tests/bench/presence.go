package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
)

// presenceInbox is the inbox prefix of the presence watch's connection. Its
// consumer's deliver subject starts with it, which is how consumers() tells
// the bench's own consumer from the services'.
const presenceInbox = "_BENCH_PRESENCE"

// lostPresence counts the nodes whose presence was deleted, purged or
// expired (the nodes bucket's TTL marker, which a watch reads as a purge):
// a node that a rollout would then skip.
type lostPresence struct {
	mu   sync.Mutex
	lost map[string]uint64 // node → revision of its first loss
	last uint64            // the highest revision seen
}

// see takes one entry of a watch on the nodes bucket.
func (l *lostPresence) see(e jetstream.KeyValueEntry) {
	if e == nil { // a watch's "initial values done" marker
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = max(l.last, e.Revision())
	if op := e.Operation(); op != jetstream.KeyValueDelete && op != jetstream.KeyValuePurge {
		return
	}
	if l.lost == nil {
		l.lost = map[string]uint64{}
	}
	if _, ok := l.lost[e.Key()]; !ok {
		l.lost[e.Key()] = e.Revision()
	}
}

// count is the number of nodes that lost their presence at a revision up to
// until (0: any).
func (l *lostPresence) count(until uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rev := range l.lost {
		if until == 0 || rev <= until {
			n++
		}
	}
	return n
}

func (l *lostPresence) seen() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// presenceWatch watches the nodes bucket for lost presences on a
// connection of its own (see presenceInbox).
type presenceWatch struct {
	lostPresence
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

// watchPresence starts a presenceWatch; the bucket must exist. It sees
// only what is written from now on.
func watchPresence(ctx context.Context, url string) (*presenceWatch, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.Name("bench-presence"), nats.CustomInboxPrefix(presenceInbox))
	if err != nil {
		return nil, fmt.Errorf("presence watch: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	kv, err := js.KeyValue(ctx, contract.BucketNodes)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("presence watch: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		nc.Close()
		return nil, fmt.Errorf("presence watch: %w", err)
	}
	p := &presenceWatch{nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				p.see(e)
			}
		}
	}()
	return p, nil
}

// lostUntil waits until the watch has read the nodes stream up to revision
// rev, then counts the nodes lost up to it.
func (p *presenceWatch) lostUntil(ctx context.Context, rev uint64) (int, error) {
	if err := waitFor(ctx, time.Minute, func() (bool, error) { return p.seen() >= rev, nil }); err != nil {
		return 0, fmt.Errorf("presence watch: revision %d not read (at %d): %w", rev, p.seen(), err)
	}
	return p.count(rev), nil
}

// stop ends the watch. Safe twice.
func (p *presenceWatch) stop() {
	p.cancel()
	<-p.done
	p.nc.Close()
}

// ownConsumer says whether a consumer is the presence watch's.
func ownConsumer(ci *jetstream.ConsumerInfo) bool {
	return strings.HasPrefix(ci.Config.DeliverSubject, presenceInbox+".")
}
