package coordinator_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// fakeFleet plays the agents' side of the contract: presence, and a status
// report for each desired config after a fixed delay. Like an agent, it
// ignores a desired config whose fingerprint is not its config's. It records
// how many nodes were applying at once.
type fakeFleet struct {
	env       *natstest.Env
	status    *store.Store[*sluicev1.NodeStatus]
	applying  atomic.Int32
	maxSeen   atomic.Int32
	fail      map[string]bool
	mu        sync.Mutex
	statusRev map[string]uint64
	held      map[string]*sluicev1.DesiredConfig // node → the apply held (not reported) by hold
	// incompatible: these nodes' agents cannot read what they are written
	// and report it INCOMPATIBLE, as an agent older than the config does.
	incompatible map[string]bool
}

// hold makes node's next applies go unreported until release.
func (f *fakeFleet) hold(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[node] = nil
}

// release reports node's last held apply, failed (Invalid) when fail is set.
func (f *fakeFleet) release(ctx context.Context, node string, fail bool) {
	f.mu.Lock()
	d := f.held[node]
	delete(f.held, node)
	if fail {
		f.fail = map[string]bool{node: true}
	}
	f.mu.Unlock()
	if d != nil {
		f.apply(ctx, d, 0)
	}
}

func startFleet(t *testing.T, env *natstest.Env, delay time.Duration, fail map[string]bool, nodes ...string) *fakeFleet {
	t.Helper()
	ctx := context.Background()
	f := &fakeFleet{env: env, fail: fail, statusRev: map[string]uint64{}, held: map[string]*sluicev1.DesiredConfig{},
		status: store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })}
	presence := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	for _, n := range nodes {
		if _, err := presence.Create(ctx, n, &sluicev1.NodePresence{Node: n, Labels: map[string]string{"zone": "a"}}); err != nil {
			t.Fatal(err)
		}
		sub, err := env.Conn.Subscribe(contract.NodeConfigSubject(n), func(m *nats.Msg) {
			var d sluicev1.DesiredConfig
			if err := store.Unmarshal(m.Data, &d); err != nil || d.GetFingerprint() == "" || render.Fingerprint(d.GetConfig()) != d.GetFingerprint() {
				return // an agent refuses it (ValueUnreadable)
			}
			go f.apply(ctx, &d, delay)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	// The coordinator publishes on its own connection: the server must
	// hold these subscriptions before it writes a node's first config.
	if err := env.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeFleet) apply(ctx context.Context, d *sluicev1.DesiredConfig, delay time.Duration) {
	n := f.applying.Add(1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(delay) // the apply itself, not a wait for a condition
	f.applying.Add(-1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, held := f.held[d.GetNode()]; held {
		f.held[d.GetNode()] = d
		return
	}
	phase := sluicev1.NodePhase_NODE_PHASE_PROVISIONED
	if f.fail[d.GetNode()] && !d.GetRevert() {
		phase = sluicev1.NodePhase_NODE_PHASE_INVALID
	}
	if f.incompatible[d.GetNode()] {
		phase = sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE
	}
	rev, err := f.status.Update(ctx, d.GetNode(), &sluicev1.NodeStatus{
		Node: d.GetNode(), Phase: phase, Fingerprint: d.GetFingerprint(), Revision: d.GetRevision(),
		Rollout: d.GetRollout(), LastUpdate: timestamppb.Now(), Message: "fake", FailedCheck: "fake-check",
	}, f.statusRev[d.GetNode()])
	if err == nil {
		f.statusRev[d.GetNode()] = rev
	}
}

// moveHead writes a revision and points head at it, as the configurator does.
func moveHead(t *testing.T, env *natstest.Env, gen uint64, maxPar string, intents ...*sluicev1.Intent) *sluicev1.Revision {
	t.Helper()
	ctx := context.Background()
	rev := &sluicev1.Revision{Id: render.RevisionID(intents), Intents: intents, CreatedAt: timestamppb.Now()}
	if _, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Create(ctx, rev.Id, rev); err != nil {
		t.Fatal(err)
	}
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	if _, err := heads.Mutate(ctx, contract.KeyHead, func(*sluicev1.Head) (*sluicev1.Head, error) {
		return &sluicev1.Head{Revision: rev.Id, Generation: gen, Strategy: &sluicev1.Strategy{MaxParallel: maxPar}, Reason: "test"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	return rev
}

func table(name string, id uint32) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id}}}
}

func startCoordinator(t *testing.T, env *natstest.Env, instance string) (stop func()) {
	t.Helper()
	svc, err := coordinator.New(coordinator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.Nop(),
		Instance: instance, SaveInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func waitRollout(t *testing.T, env *natstest.Env, id string, want sluicev1.RolloutPhase) *sluicev1.Rollout {
	t.Helper()
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var got *sluicev1.Rollout
	// margin: the poll ends as soon as the phase is reached; 60s is many
	// times what a rollout of a few fake nodes takes on a loaded machine.
	natstest.Eventually(t, 60*time.Second, "rollout "+id+" to reach "+want.String(), func() bool {
		e, err := rollouts.Get(context.Background(), id)
		got = e.Value
		return err == nil && e.Value.GetPhase() == want
	})
	return got
}

func TestCoordinator_RollsOutWithinMaxParallel(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	nodes := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	// margin: an apply lasts 300ms, so the two configs of a wave, written
	// together, overlap at the fleet unless one is delivered 300ms late.
	fleet := startFleet(t, env, 300*time.Millisecond, nil, nodes...)
	startCoordinator(t, env, "c1")
	rev := moveHead(t, env, 1, "2", table("t1", 100))

	r := waitRollout(t, env, "1-"+render.Short(rev.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	if c := r.GetCounts(); c.GetTotal() != 6 || c.GetProvisioned() != 6 {
		t.Fatalf("counts = %v", c)
	}
	if m := fleet.maxSeen.Load(); m != 2 {
		t.Fatalf("nodes applying at once: max %d, want exactly maxParallel 2", m)
	}
	ctx := context.Background()
	cfgs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	for _, n := range nodes {
		d, err := cfgs.Get(ctx, contract.DesiredKey(n))
		if err != nil || d.Value.GetRevision() != rev.Id || d.Value.GetLeaderEpoch() == 0 {
			t.Fatalf("%s desired = %v, %v", n, d.Value, err)
		}
	}
	refs := store.New(env.Buckets.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	// margin: the poll ends as soon as last-applied is written.
	natstest.Eventually(t, 30*time.Second, "last-applied to name the revision", func() bool {
		e, err := refs.Get(ctx, contract.KeyLastApplied)
		return err == nil && e.Value.GetRevision() == rev.Id
	})
	if _, err := refs.Get(ctx, contract.KeyActive); err == nil {
		t.Fatal("rollouts/active still set after the rollout ended")
	}

	// The next revision keeps each node's previous desired config as its backup.
	rev2 := moveHead(t, env, 2, "3", table("t1", 100), table("t2", 200))
	waitRollout(t, env, "2-"+render.Short(rev2.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	b, err := cfgs.Get(ctx, contract.BackupKey("n1"))
	if err != nil || b.Value.GetRevision() != rev.Id {
		t.Fatalf("n1 backup = %v, %v; want the first revision's config", b.Value, err)
	}
}

func TestCoordinator_FailingNodeRevertsTouchedNodesAndRecordsItsFingerprint(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	startFleet(t, env, 20*time.Millisecond, map[string]bool{"n2": true}, "n1", "n2", "n3", "n4")
	startCoordinator(t, env, "c1")
	rev := moveHead(t, env, 1, "1", table("t1", 100))
	r := waitRollout(t, env, "1-"+render.Short(rev.Id), sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK)
	if c := r.GetCounts(); c.GetReverted() != 2 {
		t.Fatalf("counts = %v; want n1 and n2 reverted, n3 and n4 never started", c)
	}
	if len(r.GetFailures()) != 1 || r.GetFailures()[0].GetNode() != "n2" || r.GetFailures()[0].GetFailedCheck() != "fake-check" {
		t.Fatalf("failures = %v", r.GetFailures())
	}
	ctx := context.Background()
	cfgs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	for _, n := range []string{"n3", "n4"} {
		if _, err := cfgs.Get(ctx, contract.DesiredKey(n)); err == nil {
			t.Fatalf("%s got a desired config after the rollout stopped", n)
		}
	}
	empty := render.Fingerprint(&sluicev1.NodeConfig{})
	for _, n := range []string{"n1", "n2"} {
		d, err := cfgs.Get(ctx, contract.DesiredKey(n))
		if err != nil || !d.Value.GetRevert() || d.Value.GetFingerprint() != empty {
			t.Fatalf("%s desired = %v, %v; want a revert to its (empty) backup", n, d.Value, err)
		}
	}
	bad := store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
	f, err := bad.Get(ctx, r.GetFailures()[0].GetFingerprint())
	if err != nil || f.Value.GetNode() != "n2" || f.Value.GetCheck() != "fake-check" || f.Value.GetRevision() != rev.Id {
		t.Fatalf("invalid fingerprint record = %v, %v", f.Value, err)
	}
}

func TestCoordinator_StandbyTakesOverAndFinishesTheRollout(t *testing.T) {
	s := contract.DefaultSettings()
	s.LeaderLease = 600 * time.Millisecond
	env := natstest.Start(t, s)
	startFleet(t, env, 100*time.Millisecond, nil, "n1", "n2", "n3", "n4", "n5")
	stopFirst := startCoordinator(t, env, "c1")
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "c1 to lead", func() bool {
		e, err := leases.Get(context.Background(), contract.LeaseCoordinator)
		return err == nil && e.Value.GetHolder() == "c1"
	})
	startCoordinator(t, env, "c2")
	rev := moveHead(t, env, 1, "1", table("t1", 100))
	id := "1-" + render.Short(rev.Id)
	status := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	natstest.Eventually(t, 30*time.Second, "first node provisioned", func() bool {
		_, err := status.Get(context.Background(), "n1")
		return err == nil
	})
	stopFirst() // c2 must take over mid-rollout
	waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
}

// A clean stop releases the lease and the standby, watching it, takes it at
// once. With a 60 s lease it used to wait for its next poll, every renew
// interval (20 s): 0-20 s. margin: 5 s is far above a handover (about a
// millisecond plus a state load) and far below what a poll needs 75% of the
// time; the bench measures the handover (clean_takeover_ms, docs/benchmarks.md).
func TestCoordinator_CleanStop_StandbyTakesTheLeaseAtOnce(t *testing.T) {
	s := contract.DefaultSettings()
	s.LeaderLease = time.Minute
	env := natstest.Start(t, s)
	stopFirst := startCoordinator(t, env, "c1")
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	holder := func() string {
		e, err := leases.Get(context.Background(), contract.LeaseCoordinator)
		if err != nil {
			return ""
		}
		return e.Value.GetHolder()
	}
	// margin: each poll below ends as soon as its condition holds.
	natstest.Eventually(t, 30*time.Second, "c1 to lead", func() bool { return holder() == "c1" })
	var logs lockedLog
	svc, err := coordinator.New(coordinator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.New(&logs),
		Instance: "c2", SaveInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// c2 has read the lease and waits: it logs that it stands by.
	natstest.Eventually(t, 30*time.Second, "c2 to stand by", func() bool { return strings.Contains(logs.String(), "standing by") })
	stopped := time.Now()
	stopFirst()
	natstest.Eventually(t, 5*time.Second, "c2 to take the released lease", func() bool { return holder() == "c2" })
	t.Logf("c2 holds the lease %s after c1 stopped", time.Since(stopped).Round(time.Millisecond))
}

// Ended rollout records beyond the retention are deleted when a rollout
// finishes; the newest (and the one in force) stay.
func TestCoordinator_KeepsOnlyTheRetainedRolloutRecords(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	svc, err := coordinator.New(coordinator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.Nop(),
		Instance: "keep-2", SaveInterval: 20 * time.Millisecond, Retention: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var ids []string
	for gen := uint64(1); gen <= 5; gen++ {
		rev := moveHead(t, env, gen, "1", table("t", uint32(100+gen)))
		id := contract.RolloutID(gen, rev.Id)
		waitRollout(t, env, id, sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED) // no nodes: it ends at once
		ids = append(ids, id)
	}
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	// margin: the poll ends as soon as the old records are gone.
	natstest.Eventually(t, 30*time.Second, "only the newest 2 records to remain", func() bool {
		keys, err := rollouts.Keys(context.Background())
		if err != nil {
			return false
		}
		var records []string
		for _, k := range keys {
			if !contract.IsControlKey(k) && k != contract.KeyActive && k != contract.KeyLastApplied {
				records = append(records, k)
			}
		}
		slices.Sort(records)
		return slices.Equal(records, []string{ids[3], ids[4]})
	})
}

// lockedLog is a log sink that tests read while the service writes.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
