package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// pausable plays a coordinator process that can be SIGSTOPped: while paused,
// every write it is about to make (lease renewals included) blocks, and its
// clock stands still, so that when it wakes up it still believes its lease
// is valid. Only the server-side fence can stop its writes then.
type pausable struct {
	mu     sync.Mutex
	paused chan struct{} // closed = running
	frozen atomic.Pointer[time.Time]
	held   atomic.Int32 // writes that waited in the pause
}

func newPausable() *pausable {
	p := &pausable{paused: make(chan struct{})}
	close(p.paused)
	return p
}

func (p *pausable) now() time.Time {
	if t := p.frozen.Load(); t != nil {
		return *t
	}
	return time.Now()
}

func (p *pausable) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.frozen.Store(&now)
	p.paused = make(chan struct{})
}

func (p *pausable) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.paused:
	default:
		close(p.paused)
	}
}

func (p *pausable) beforeWrite(ctx context.Context) {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	select {
	case <-ch:
		return
	default:
	}
	p.held.Add(1)
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// TestFencing_PausedLeaderThatWakesUpWritesNothing is invariant I6: the
// leader is paused past its lease mid-rollout, the standby takes over and
// writes, the old leader wakes up believing it still leads — and not one of
// its writes lands in any bucket.
func TestFencing_PausedLeaderThatWakesUpWritesNothing(t *testing.T) {
	s := contract.DefaultSettings()
	// margin: the new leader keeps its term (the record's epoch is checked)
	// unless a renewal, due every second, is 2s late (with 1s, 670ms late
	// was enough); the old lease still expires soon enough for a short test.
	s.LeaderLease = 3 * time.Second
	env := natstest.Start(t, s)
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"}
	startFleet(t, env, 150*time.Millisecond, nil, nodes...)

	old := newPausable()
	oldConn := env.Connect(t)
	svc, err := coordinator.New(coordinator.Config{Conn: oldConn, Settings: s, Log: zerolog.Nop(), Instance: "old",
		SaveInterval: 20 * time.Millisecond, TickInterval: 50 * time.Millisecond, Now: old.now, BeforeWrite: old.beforeWrite})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { old.resume(); cancel(); <-done })

	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	holder := func() *sluicev1.LeaderLease {
		e, _ := leases.Get(context.Background(), contract.LeaseCoordinator)
		return e.Value
	}
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "the old leader to publish its term", func() bool { return holder().GetEpoch() != 0 })
	oldEpoch := holder().GetEpoch()

	rev := moveHead(t, env, 1, "1", table("t1", 100))
	id := "1-" + render.Short(rev.Id)
	status := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	natstest.Eventually(t, 30*time.Second, "the first node to be provisioned", func() bool {
		_, err := status.Get(context.Background(), "n1")
		return err == nil
	})
	old.pause()
	startCoordinator(t, env, "new")
	natstest.Eventually(t, 60*time.Second, "the standby to take over", func() bool {
		return holder().GetHolder() == "new" && holder().GetEpoch() > oldEpoch
	})
	newEpoch := holder().GetEpoch()
	waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	if old.held.Load() == 0 {
		t.Fatal("the paused leader had no write pending: the test proves nothing")
	}

	// Wake the old leader up: it believes its lease valid (its clock stood
	// still) and goes on writing what it had decided.
	old.resume()
	// Its term ends once a write or renewal fails on the fence; by then
	// every write of the term has been tried (its writers are waited for).
	natstest.Eventually(t, 30*time.Second, "the old leader's term to end", func() bool {
		leading, _ := svc.Leading()
		return !leading
	})
	if err := oldConn.Flush(); err != nil { // what it sent has reached the server
		t.Fatal(err)
	}

	for _, bucket := range []jetstream.KeyValue{env.Buckets.NodeConfigs, env.Buckets.Rollouts, env.Buckets.Fingerprints} {
		fence, err := bucket.Get(context.Background(), contract.KeyFence)
		if err != nil {
			t.Fatalf("%s has no fence: %v", bucket.Bucket(), err)
		}
		keys, err := bucket.Keys(context.Background())
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			t.Fatal(err)
		}
		for _, k := range keys {
			if contract.IsControlKey(k) {
				continue
			}
			e, err := bucket.Get(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			epoch := epochOf(t, bucket.Bucket(), e.Value())
			if epoch == oldEpoch && e.Revision() > fence.Revision() {
				t.Errorf("%s/%s was written by the deposed term %d after term %d fenced it (rev %d > fence %d)",
					bucket.Bucket(), k, oldEpoch, newEpoch, e.Revision(), fence.Revision())
			}
		}
	}
	r := waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	if r.GetLeaderEpoch() != newEpoch {
		t.Fatalf("the record was last written by term %d, want the new leader's %d", r.GetLeaderEpoch(), newEpoch)
	}
}

func epochOf(t *testing.T, bucket string, b []byte) uint64 {
	t.Helper()
	switch bucket {
	case contract.BucketNodeConfigs:
		var d sluicev1.DesiredConfig
		_ = store.Unmarshal(b, &d)
		return d.GetLeaderEpoch()
	case contract.BucketFingerprints:
		var f sluicev1.InvalidFingerprint
		_ = store.Unmarshal(b, &f)
		return f.GetLeaderEpoch()
	default:
		var r sluicev1.Rollout
		_ = store.Unmarshal(b, &r)
		return r.GetLeaderEpoch()
	}
}

// TestElection_DuplicateInstanceNameIsAStartupError: two coordinators with
// the same --instance do not take the lease from each other; the second stops.
func TestElection_DuplicateInstanceNameIsAStartupError(t *testing.T) {
	// margin: the second instance takes a lease of its name that goes
	// unrenewed for 1.5 renew intervals for a dead predecessor's. With the
	// default 10s lease (renewed every 3.3s) the first would have to renew
	// 1.7s late for that; with the 1s lease it had, 170ms was enough.
	s := contract.DefaultSettings()
	env := natstest.Start(t, s)
	startCoordinator(t, env, "same")
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	// margin: the poll ends as soon as the first leads.
	natstest.Eventually(t, 30*time.Second, "the first to lead", func() bool {
		e, err := leases.Get(context.Background(), contract.LeaseCoordinator)
		return err == nil && e.Value.GetEpoch() != 0
	})
	first, _ := leases.Get(context.Background(), contract.LeaseCoordinator)
	svc, err := coordinator.New(coordinator.Config{Conn: env.Connect(t), Settings: s, Log: zerolog.Nop(), Instance: "same"})
	if err != nil {
		t.Fatal(err)
	}
	// margin: Run returns once it saw the lease renewed, within two renew
	// intervals (about 7s); the deadline only stops a Run that never does.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = svc.Run(ctx)
	if !errors.Is(err, coordinator.ErrDuplicateInstance) {
		t.Fatalf("second instance: Run = %v, want ErrDuplicateInstance", err)
	}
	now, _ := leases.Get(context.Background(), contract.LeaseCoordinator)
	if now.Value.GetSession() != first.Value.GetSession() {
		t.Fatalf("the duplicate took the lease: session %s, want %s", now.Value.GetSession(), first.Value.GetSession())
	}
}

// TestCoordinator_NextRolloutAfterARestartStarts: a finished rollout leaves
// rollouts/active deleted (a delete marker); the next term's first start
// must write over that marker, not wedge on it.
func TestCoordinator_NextRolloutAfterARestartStarts(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	startFleet(t, env, 10*time.Millisecond, nil, "n1", "n2")
	stop := startCoordinator(t, env, "c1")
	rev := moveHead(t, env, 1, "2", table("t1", 100))
	waitRollout(t, env, "1-"+render.Short(rev.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	stop()
	startCoordinator(t, env, "c1")
	rev2 := moveHead(t, env, 2, "2", table("t1", 100), table("t2", 200))
	waitRollout(t, env, "2-"+render.Short(rev2.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
}
