package agent_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// lossyKV is a bucket with the answer of the first Update that follows
// arm lost: the write lands (landed) or does not, and the caller hears
// nothing until its context ends, as when the stream's leader stops after
// taking a write or the message is lost on the way.
type lossyKV struct {
	jetstream.KeyValue
	landed bool

	mu      sync.Mutex
	armed   bool
	updates int           // Update calls since arm
	budget  time.Duration // how long the lost Update's caller was ready to wait
}

func (l *lossyKV) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.updates = true, 0
}

func (l *lossyKV) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.updates
}

// lostBudget is how long the caller of the lost Update was ready to wait
// for its answer (0: none lost yet, or no deadline).
func (l *lossyKV) lostBudget() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.budget
}

func (l *lossyKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	l.mu.Lock()
	lose := l.armed
	l.armed = false
	l.updates++
	if dl, ok := ctx.Deadline(); ok && lose {
		l.budget = time.Until(dl)
	}
	l.mu.Unlock()
	if !lose {
		return l.KeyValue.Update(ctx, key, value, last)
	}
	if l.landed {
		if _, err := l.KeyValue.Update(context.Background(), key, value, last); err != nil {
			return 0, err
		}
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

// A status write whose answer is lost costs one short attempt, not the
// whole request timeout (store.AttemptTimeout, 5 s): the agent reads the key
// and finds its write there (landed) or writes again (lost). Waiting out
// the timeout held a node's acknowledgement past a short pickup deadline
// (chaos seeds 76 and 82).
func TestAgent_StatusWriteWhoseAnswerIsLost_IsCheckedAndNotWaitedOut(t *testing.T) {
	for _, tc := range []struct {
		name        string
		landed      bool
		wantUpdates int
		wantLog     string
	}{
		{name: "the write landed", landed: true, wantUpdates: 1, wantLog: "status write unanswered, but it landed"},
		{name: "the write was lost", landed: false, wantUpdates: 2, wantLog: "status write unanswered and not stored; writing again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, contract.DefaultSettings())
			b := *f.env.Buckets
			lossy := &lossyKV{KeyValue: b.Status, landed: tc.landed}
			b.Status = lossy
			var logs logBuffer
			f.start(t, agent.Config{Node: "node-01", Applier: &recorder{}, StateDir: t.TempDir(), Log: logs.logger(),
				JetStream: f.env.JS, Buckets: &b})
			first := desiredConfig("node-01", "a", 100)
			f.writeDesired(t, first)
			f.waitStatus(t, "node-01", "first config provisioned", provisioned(first.Fingerprint))

			lossy.arm() // the next config's outcome: an apply this fast is never acknowledged before it
			second := desiredConfig("node-01", "b", 200)
			written := time.Now()
			f.writeDesired(t, second)
			f.waitStatus(t, "node-01", "second config provisioned", provisioned(second.Fingerprint))
			t.Logf("provisioned %s after the write", time.Since(written).Round(time.Millisecond))
			// A write that landed is seen before the agent learns of it.
			natstest.Eventually(t, 10*time.Second, "the agent to settle the lost answer", func() bool {
				return logs.count(tc.wantLog) > 0
			})
			// The lost answer was not waited out: its attempt was ready to
			// wait one short attempt, not store.AttemptTimeout. Read from the
			// attempt's deadline, not the clock, so a loaded machine cannot
			// blur a 1s attempt into the 5s timeout.
			if b := lossy.lostBudget(); b <= 0 || b > store.AttemptTimeout/2 {
				t.Errorf("the lost status write was ready to wait %s, want one short attempt (at most %s)", b, store.AttemptTimeout/2)
			}
			if n := logs.count(tc.wantLog); n != 1 {
				t.Errorf("log %q seen %d times, want 1", tc.wantLog, n)
			}
			// Provisioned: its lost attempt, and a second one if it was lost.
			if got := lossy.count(); got != tc.wantUpdates {
				t.Errorf("%d status writes since the answer was lost, want %d", got, tc.wantUpdates)
			}
		})
	}
}

// A heartbeat whose answer is lost gives up within the heartbeat interval
// (the agent's loop, which receives desired configs, waits on it) and the
// next beat comes soon; finding its own earlier beat in the key is no sign
// of another agent. A presence written with another start time is.
func TestAgent_HeartbeatWhoseAnswerIsLost_IsRetriedSoonAndIsNoForeignWrite(t *testing.T) {
	s := contract.DefaultSettings()
	// A beat every second; margin: the lease lapses only if one is 2s late.
	s.NodeLease = 3 * time.Second
	f := newFleet(t, s)
	b := *f.env.Buckets
	lossy := &lossyKV{KeyValue: b.Nodes, landed: true}
	b.Nodes = lossy
	var logs logBuffer
	rec := &recorder{}
	f.start(t, agent.Config{Node: "node-01", Applier: rec, StateDir: t.TempDir(), Log: logs.logger(),
		JetStream: f.env.JS, Buckets: &b})
	natstest.Eventually(t, waitFor, "registered", func() bool {
		_, err := f.nodes.Get(context.Background(), "node-01")
		return err == nil
	})
	lossy.arm()
	natstest.Eventually(t, waitFor, "a beat under way", func() bool { return lossy.count() == 1 })
	// Written while the agent's loop waits on that beat: taken once it gives up.
	d := desiredConfig("node-01", "a", 100)
	f.writeDesired(t, d)
	f.waitStatus(t, "node-01", "the config provisioned while a beat's answer was lost", provisioned(d.Fingerprint))
	// The loop gave up on the beat within the heartbeat interval, not
	// store.AttemptTimeout: read from the beat's deadline, not the clock.
	if b := lossy.lostBudget(); b <= 0 || b > s.HeartbeatInterval() {
		t.Errorf("the lost beat was ready to wait %s, want at most the heartbeat interval %s", b, s.HeartbeatInterval())
	}
	natstest.Eventually(t, waitFor, "a beat unanswered", func() bool { return logs.count("renew presence; retrying shortly") == 1 })
	// The beats after it renew the lease at their usual pace.
	natstest.Eventually(t, waitFor, "three beats written since", func() bool { return lossy.count() >= 4 })
	if n := logs.count("presence was rewritten by someone else"); n != 0 {
		t.Errorf("its own beat, landed unanswered, was taken %d time(s) for another agent's", n)
	}
	// Another agent with this node name (another start time) writes the
	// key; the agent beats every second, so a beat may land between the
	// read and the write: read again and retry on a conflict.
	natstest.Eventually(t, waitFor, "a foreign presence written", func() bool {
		e, err := f.nodes.Get(context.Background(), "node-01")
		if err != nil {
			t.Fatalf("presence after the lost answer: %v", err)
		}
		other := &sluicev1.NodePresence{Node: "node-01", StartedAt: timestamppb.New(e.Value.GetStartedAt().AsTime().Add(time.Hour)),
			HeartbeatAt: timestamppb.Now()}
		_, err = f.nodes.Update(context.Background(), "node-01", other, e.Revision)
		if err != nil && !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
		return err == nil
	})
	natstest.Eventually(t, waitFor, "the foreign write noticed", func() bool { return logs.count("presence was rewritten by someone else") == 1 })
}
