package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/agent"
)

// lossyStatus is the status bucket with the answer of the first status
// write that follows arm lost: the write lands (landed) or does not, and the
// caller hears nothing until its context ends, as when the stream's leader
// stops after taking a write or the message is lost on the way.
type lossyStatus struct {
	jetstream.KeyValue
	landed bool

	mu      sync.Mutex
	armed   bool
	updates int // Update calls since arm
}

func (l *lossyStatus) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.updates = true, 0
}

func (l *lossyStatus) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.updates
}

func (l *lossyStatus) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	l.mu.Lock()
	lose := l.armed
	l.armed = false
	l.updates++
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
			lossy := &lossyStatus{KeyValue: b.Status, landed: tc.landed}
			b.Status = lossy
			var logs logBuffer
			f.start(t, agent.Config{Node: "node-01", Applier: &recorder{}, StateDir: t.TempDir(), Log: logs.logger(),
				JetStream: f.env.JS, Buckets: &b})
			first := desiredConfig("node-01", "a", 100)
			f.writeDesired(t, first)
			f.waitStatus(t, "node-01", "first config provisioned", provisioned(first.Fingerprint))

			lossy.arm() // the Provisioning acknowledgement of the next config
			second := desiredConfig("node-01", "b", 200)
			written := time.Now()
			f.writeDesired(t, second)
			// Well under store.AttemptTimeout: the lost answer was not waited out.
			within := store.AttemptTimeout * 4 / 5
			natstest.Eventually(t, within, "second config provisioned", func() bool {
				e, err := f.statuses.Get(context.Background(), "node-01")
				return err == nil && provisioned(second.Fingerprint)(e.Value)
			})
			t.Logf("provisioned %s after the write", time.Since(written).Round(time.Millisecond))
			if n := logs.count(tc.wantLog); n != 1 {
				t.Errorf("log %q seen %d times, want 1", tc.wantLog, n)
			}
			// Provisioning (its lost attempt, and a second one if it was lost) and Provisioned.
			if got := lossy.count(); got != tc.wantUpdates+1 {
				t.Errorf("%d status writes since the answer was lost, want %d", got, tc.wantUpdates+1)
			}
		})
	}
}
