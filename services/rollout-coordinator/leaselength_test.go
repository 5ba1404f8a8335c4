package coordinator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// runCoordinator runs a coordinator with lease as its --leader-lease, its
// log in logs; stop stops it (cleanly: it releases a lease it holds).
func runCoordinator(t *testing.T, env *natstest.Env, instance string, lease time.Duration, logs *lockedLog) (stop func()) {
	t.Helper()
	s := env.Settings
	s.LeaderLease = lease
	svc, err := coordinator.New(coordinator.Config{Conn: env.Connect(t), Settings: s, Log: zerolog.New(logs),
		Instance: instance, SaveInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func leasesTTL(t *testing.T, kv jetstream.KeyValue) time.Duration {
	t.Helper()
	st, err := kv.Status(context.Background())
	if err != nil {
		t.Fatalf("status of %s: %v", contract.BucketLeases, err)
	}
	return st.TTL()
}

// keepsTerm waits until holder has renewed the term it holds now n times,
// failing if the lease changes hands, expires or is released meanwhile.
func keepsTerm(t *testing.T, env *natstest.Env, holder string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // margin: ends after n renewals, seconds
	defer cancel()
	w, err := env.Buckets.Leases.Watch(ctx, contract.LeaseCoordinator)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var acquired time.Time
	seen := -1 // the current value comes first
	for seen < n {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			t.Fatalf("%s renewed its lease %d times, want %d: %v", holder, seen, n, ctx.Err())
		}
		if e == nil {
			continue // the end of the current values
		}
		if e.Operation() != jetstream.KeyValuePut {
			t.Fatalf("the lease %s (revision %d) while %s held it; want it renewed %d times", e.Operation(), e.Revision(), holder, n)
		}
		v := &sluicev1.LeaderLease{}
		if err := store.Decode(contract.BucketLeases, e.Key(), e.Value(), v); err != nil {
			t.Fatal(err)
		}
		if v.GetHolder() != holder || (seen >= 0 && !v.GetAcquiredAt().AsTime().Equal(acquired)) {
			t.Fatalf("the lease went to %s (acquired %s) while %s held it since %s; want %s to keep it",
				v.GetHolder(), v.GetAcquiredAt().AsTime(), holder, acquired, holder)
		}
		acquired = v.GetAcquiredAt().AsTime()
		seen++
	}
}

// Issue 38: a coordinator started with a shorter --leader-lease beside a
// leader used to set the leases bucket's TTL to it, and the leader's lease
// expired between two renewals: the standby took over while the leader
// still ran. Now the standby keeps the TTL and renews by it once it leads;
// the leader keeps its term, nobody loses leadership.
func TestCoordinator_StandbyWithAShorterLease_LeavesTheLeaderItsLease(t *testing.T) {
	const long, short = 10 * time.Second, 2 * time.Second
	s := contract.DefaultSettings()
	s.LeaderLease = long
	env := natstest.Start(t, s)
	evs := watchEvents(t, env)
	var c1Logs, c2Logs lockedLog
	stopC1 := runCoordinator(t, env, "c1", long, &c1Logs)
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "c1 to lead", func() bool { return evs.count(contract.EventLeadershipAcquired, "c1") > 0 })
	runCoordinator(t, env, "c2", short, &c2Logs)
	natstest.Eventually(t, 30*time.Second, "c2 to stand by", func() bool { return strings.Contains(c2Logs.String(), "standing by") })
	if !strings.Contains(c2Logs.String(), "keeping the leader lease 10s") {
		t.Errorf("c2 did not log that it keeps the lease in force; log:\n%s", c2Logs.String())
	}
	// Three of c1's renewals (every 2.5 s): with the TTL cut to 2 s its
	// lease would have expired before the first.
	keepsTerm(t, env, "c1", 3)
	if ttl := leasesTTL(t, env.Buckets.Leases); ttl != long {
		t.Fatalf("leases TTL %s with c1 leading and c2 (--leader-lease %s) standing by, want c1's %s kept", ttl, short, long)
	}
	if n := evs.count(contract.EventLeadershipLost, ""); n != 0 {
		t.Fatalf("%d LeadershipLost events with c1 leading and c2 standing by, want none", n)
	}
	// c1 stops: c2 leads by the lease in force and keeps it for three of
	// its renewals; it does not cut the TTL under itself either.
	stopC1()
	natstest.Eventually(t, 30*time.Second, "c2 to lead", func() bool { return evs.count(contract.EventLeadershipAcquired, "c2") > 0 })
	keepsTerm(t, env, "c2", 3)
	if ttl := leasesTTL(t, env.Buckets.Leases); ttl != long {
		t.Fatalf("leases TTL %s with c2 leading, want %s kept until a coordinator starts while none leads", ttl, long)
	}
	if n := evs.count(contract.EventLeadershipLost, ""); n != 0 {
		t.Fatalf("%d LeadershipLost events, want none", n)
	}
}

// While no coordinator holds the lease (none ever did, or the last one
// released it) a starting coordinator sets the TTL to its --leader-lease
// and leads by it.
func TestCoordinator_NoLeaseHeld_TheStartingCoordinatorSetsTheTTL(t *testing.T) {
	const long, short = 10 * time.Second, 2 * time.Second
	s := contract.DefaultSettings()
	s.LeaderLease = long
	env := natstest.Start(t, s)
	evs := watchEvents(t, env)
	var c1Logs, c2Logs lockedLog
	stopC1 := runCoordinator(t, env, "c1", long, &c1Logs)
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "c1 to lead", func() bool { return evs.count(contract.EventLeadershipAcquired, "c1") > 0 })
	stopC1() // releases the lease: a delete marker
	natstest.Eventually(t, 30*time.Second, "c1 to release the lease", func() bool { return evs.count(contract.EventLeadershipReleased, "c1") > 0 })
	runCoordinator(t, env, "c2", short, &c2Logs)
	natstest.Eventually(t, 30*time.Second, "c2 to lead", func() bool { return evs.count(contract.EventLeadershipAcquired, "c2") > 0 })
	if ttl := leasesTTL(t, env.Buckets.Leases); ttl != short {
		t.Fatalf("leases TTL %s after c2 (--leader-lease %s) started while none led, want %s", ttl, short, short)
	}
	keepsTerm(t, env, "c2", 3)
	if strings.Contains(c2Logs.String(), "keeping the leader lease") {
		t.Fatalf("c2 logged that it kept the TTL, with no lease held; log:\n%s", c2Logs.String())
	}
}
