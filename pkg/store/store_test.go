package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func newStatus() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }

// latest reads key as the stream's leader has it. On a cluster a Get is a
// direct get, which any replica may answer, one still catching up with a
// write just acknowledged included (see Batcher.Last): a test that checks
// what a write left asks the leader for the key's last revision and reads
// until a Get returns that one (or, for a deleted key, says not found).
// margin: the poll ends with the first up-to-date answer; a lagging replica
// catches up within milliseconds, or seconds on a loaded machine.
func latest[T proto.Message](t *testing.T, env *natstest.Env, s *store.Store[T], key string) (store.Entry[T], error) {
	t.Helper()
	ctx := context.Background()
	rev, live, err := store.NewBatcher(env.Conn, s.Bucket()).Last(ctx, key)
	if err != nil {
		t.Fatalf("the leader's revision of %s: %v", key, err)
	}
	var e store.Entry[T]
	natstest.Eventually(t, 30*time.Second, fmt.Sprintf("a read of %s at the leader's revision %d", key, rev), func() bool {
		e, err = s.Get(ctx, key)
		if !live {
			return errors.Is(err, store.ErrNotFound)
		}
		return e.Revision == rev
	})
	return e, err
}

// TestStore runs every store test on a single server (R1) and on a 3-node
// cluster (R3), where a lost compare-and-set is a different JetStream error
// (10164). Each backend is started once and shared: tests use their own keys.
func TestStore(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = time.Second // presence expiry within the test
	backends := []struct {
		name  string
		start func(t *testing.T) (*natstest.Env, *natstest.Cluster)
	}{
		{"R1", func(t *testing.T) (*natstest.Env, *natstest.Cluster) { return natstest.Start(t, s), nil }},
		{"R3", func(t *testing.T) (*natstest.Env, *natstest.Cluster) {
			c := natstest.StartCluster(t, 3, s)
			return c.Env, c
		}},
	}
	tests := []struct {
		name string
		run  func(t *testing.T, env *natstest.Env)
	}{
		{"WritesAreCompareAndSet", testWritesAreCompareAndSet},
		{"MutateRetriesOnConflict", testMutateRetriesOnConflict},
		{"ParallelMutatesLoseNoIncrement", testParallelMutatesLoseNoIncrement},
		{"LostCASRaceIsErrConflict", testLostCASRaceIsErrConflict},
		{"ValuesAreReadableJSON", testValuesAreReadableJSON},
		{"ExpiredPresenceIsSeenByWatchers", testExpiredPresenceIsSeenByWatchers},
		{"NodeConfigWritesAreRepublished", testNodeConfigWritesAreRepublished},
		{"ListAfterWriteHoldsTheWrite", testListAfterWriteHoldsTheWrite},
		{"DirectWritesAreCompareAndSet", testDirectWritesAreCompareAndSet},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			env, cluster := b.start(t)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, env) })
			}
			if cluster != nil {
				t.Run("WritesContinueWithOneServerDown", func(t *testing.T) { testWritesContinueWithOneServerDown(t, cluster) })
			}
		})
	}
}

func testWritesAreCompareAndSet(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)

	rev, err := s.Create(ctx, "cas", &sluicev1.NodeStatus{Node: "cas", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONING})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Create(ctx, "cas", &sluicev1.NodeStatus{Node: "cas"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: got %v, want ErrConflict", err)
	}
	if _, err := s.Update(ctx, "cas", &sluicev1.NodeStatus{Node: "cas"}, rev+5); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at stale revision: got %v, want ErrConflict", err)
	}
	if _, err := s.Update(ctx, "cas", &sluicev1.NodeStatus{Node: "cas", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED}, rev); err != nil {
		t.Fatalf("update at current revision: %v", err)
	}
	got, err := latest(t, env, s, "cas")
	if err != nil || got.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		t.Fatalf("get: %v %v", got.Value, err)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: got %v, want ErrNotFound", err)
	}
}

func testMutateRetriesOnConflict(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)
	rev, err := s.Create(ctx, "mutate", &sluicev1.NodeStatus{Node: "mutate", Message: "a"})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err = s.Mutate(ctx, "mutate", func(cur *sluicev1.NodeStatus) (*sluicev1.NodeStatus, error) {
		calls++
		if calls == 1 { // a concurrent writer gets in between our read and write
			if _, err := s.Update(ctx, "mutate", &sluicev1.NodeStatus{Node: "mutate", Message: "b"}, rev); err != nil {
				t.Fatal(err)
			}
		}
		return &sluicev1.NodeStatus{Node: "mutate", Message: cur.GetMessage() + "+"}, nil
	})
	if err != nil {
		t.Fatalf("mutate: %v", err)
	}
	got, _ := latest(t, env, s, "mutate")
	// On a cluster, Mutate's own read may come from a replica still behind
	// a write and lose once more: at least one retry there, exactly one on
	// a single server.
	if calls < 2 || (env.Settings.Replicas == 1 && calls != 2) || got.Value.GetMessage() != "b+" {
		t.Fatalf("calls=%d message=%q, want 2 (at least 2 on a cluster) and b+", calls, got.Value.GetMessage())
	}
}

func testValuesAreReadableJSON(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)
	rev, err := s.Create(ctx, "json", &sluicev1.NodeStatus{Node: "json", Phase: sluicev1.NodePhase_NODE_PHASE_INVALID})
	if err != nil {
		t.Fatal(err)
	}
	// On R3 a Get may come from a replica behind the write (see latest).
	// margin: the poll ends with the first up-to-date answer.
	var e jetstream.KeyValueEntry
	natstest.Eventually(t, 30*time.Second, "the stored value", func() bool {
		e, err = env.Buckets.Status.Get(ctx, "json")
		return err == nil && e.Revision() == rev
	})
	// protojson varies its whitespace on purpose; compare the JSON itself.
	var got map[string]any
	if err := json.Unmarshal(e.Value(), &got); err != nil {
		t.Fatalf("stored value is not JSON: %s: %v", e.Value(), err)
	}
	if got["node"] != "json" || got["phase"] != "NODE_PHASE_INVALID" || len(got) != 2 {
		t.Fatalf("stored %s, want node json and phase NODE_PHASE_INVALID", e.Value())
	}
}

func testExpiredPresenceIsSeenByWatchers(t *testing.T, env *natstest.Env) {
	// margin: the 1s lease expires within a second or two; the wait ends
	// as soon as the expiry arrives.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	values, err := nodes.Watch(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := nodes.WatchKeys(ctx, ">") // headers only: the reaper's
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]<-chan store.Entry[*sluicev1.NodePresence]{"Watch": values, "WatchKeys": keys} {
		if e := <-w; e.Key != "" {
			t.Fatalf("%s: want caught-up marker first, got %q", name, e.Key)
		}
	}
	rev, err := nodes.Create(ctx, "n1", &sluicev1.NodePresence{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if e := <-values; e.Key != "n1" || e.Deleted || e.Revision != rev || e.Value.GetNode() != "n1" {
		t.Fatalf("Watch: want put of n1 at %d with its value, got %+v", rev, e)
	}
	if e := <-keys; e.Key != "n1" || e.Deleted || e.Revision != rev || e.Value != nil || e.Err != nil {
		t.Fatalf("WatchKeys: want put of n1 at %d without a value, got %+v", rev, e)
	}
	for name, w := range map[string]<-chan store.Entry[*sluicev1.NodePresence]{"Watch": values, "WatchKeys": keys} {
		select {
		case e := <-w:
			if e.Key != "n1" || !e.Deleted {
				t.Fatalf("%s: want expiry of n1, got %+v", name, e)
			}
		case <-ctx.Done():
			t.Fatalf("%s: lease expiry never reached the watcher", name)
		}
	}
}

func testNodeConfigWritesAreRepublished(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	sub, err := env.Conn.SubscribeSync(contract.NodeConfigSubject("n1"))
	if err != nil {
		t.Fatal(err)
	}
	cfgs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := cfgs.Create(ctx, contract.DesiredKey("n1"), &sluicev1.DesiredConfig{Node: "n1", Fingerprint: "abc"}); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(30 * time.Second) // margin: returns as soon as it comes
	if err != nil {
		t.Fatalf("no republished message: %v", err)
	}
	var got sluicev1.DesiredConfig
	if err := store.Unmarshal(msg.Data, &got); err != nil || got.Fingerprint != "abc" {
		t.Fatalf("republished %s (%v)", msg.Data, err)
	}
}

func newHead() *sluicev1.Head { return &sluicev1.Head{} }

// Many goroutines increment one counter through Mutate: every increment
// lands once, and the lost compare-and-sets were retried.
func testParallelMutatesLoseNoIncrement(t *testing.T, env *natstest.Env) {
	const workers, each = 8, 25
	// margin: only bounds a hang; 200 increments take a second or two.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := store.New(env.Buckets.Revisions, newHead)
	var calls atomic.Int64
	inc := func(cur *sluicev1.Head) (*sluicev1.Head, error) {
		calls.Add(1)
		return &sluicev1.Head{Revision: "r", Generation: cur.GetGeneration() + 1}, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := s.Mutate(ctx, contract.KeyHead, inc)
				// Mutate gives up after 20 lost compare-and-sets, having written
				// nothing; eight writers of one key on a loaded cluster, whose
				// reads may come from a replica behind, can lose that often.
				// The caller tries again: no increment may be lost either way.
				for errors.Is(err, store.ErrConflict) && ctx.Err() == nil {
					_, err = s.Mutate(ctx, contract.KeyHead, inc)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("mutate: %v", err)
	}
	got, err := latest(t, env, s, contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	if got.Value.GetGeneration() != workers*each {
		t.Fatalf("counter %d, want %d", got.Value.GetGeneration(), workers*each)
	}
	if calls.Load() <= workers*each {
		t.Fatalf("%d calls of the mutate function for %d increments: no conflict was retried", calls.Load(), workers*each)
	}
	t.Logf("%d increments took %d attempts", workers*each, calls.Load())
}

// Two writers read the same revision and both write it: one wins, the other
// gets ErrConflict, whatever JetStream error the server gave (on a cluster
// it is ErrKeyRevisionMismatch, 10164).
func testLostCASRaceIsErrConflict(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)
	rev, err := s.Create(ctx, "race", &sluicev1.NodeStatus{Node: "race", Message: "start"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "race", &sluicev1.NodeStatus{Node: "race", Message: "first"}, rev); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	tests := []struct {
		name  string
		write func() error
	}{
		{"update", func() error {
			_, err := s.Update(ctx, "race", &sluicev1.NodeStatus{Node: "race", Message: "second"}, rev)
			return err
		}},
		{"create", func() error {
			_, err := s.Create(ctx, "race", &sluicev1.NodeStatus{Node: "race", Message: "second"})
			return err
		}},
		{"delete", func() error { return s.Delete(ctx, "race", rev) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.write(); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("losing %s: got %v, want ErrConflict", tc.name, err)
			}
		})
	}
	if env.Settings.Replicas > 1 {
		// What store maps: the raw error of a lost update on a cluster.
		if _, err := env.Buckets.Status.Update(ctx, "race", []byte("{}"), rev); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			t.Fatalf("raw lost update on R%d: got %v, want ErrKeyRevisionMismatch", env.Settings.Replicas, err)
		}
	}
	got, err := latest(t, env, s, "race")
	if err != nil || got.Value.GetMessage() != "first" {
		t.Fatalf("after the race: %v %v, want the first writer's value", got.Value, err)
	}
}

// With one of three servers stopped, R3 buckets keep accepting writes and
// reads; the stopped server catches up when it comes back.
func testWritesContinueWithOneServerDown(t *testing.T, c *natstest.Cluster) {
	// margin: only bounds a hang, across an election and a restart.
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	s := store.New(c.Buckets.Revisions, newHead)
	inc := func(cur *sluicev1.Head) (*sluicev1.Head, error) {
		return &sluicev1.Head{Revision: "r", Generation: cur.GetGeneration() + 1}, nil
	}
	// The server most likely to lead is as good a victim as any: stop the first.
	c.StopServer(t, 0)
	for i := range 10 {
		// A write racing the election of a new stream leader may time out; it
		// is retried like any unavailable write. margin: the poll ends with
		// the first write that lands; an election on a loaded machine can
		// take many seconds.
		natstest.Eventually(t, 60*time.Second, "a write with one server down", func() bool {
			actx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
			defer cancel()
			_, err := s.Mutate(actx, contract.KeyHead, inc)
			if err != nil {
				t.Logf("write %d: %v", i, err)
			}
			return err == nil
		})
	}
	c.RestartServer(t, 0)
	got, err := latest(t, c.Env, s, contract.KeyHead) // the restarted server may answer before it caught up
	if err != nil || got.Value.GetGeneration() < 10 {
		t.Fatalf("after restart: %v %v, want generation at least 10", got.Value, err)
	}
}

// A listing's watcher is an R1 consumer that the server may place on a
// follower, which can lag the leader: on a cluster, a listing right after a
// write must still hold that write (the configurator cuts revisions from one).
func testListAfterWriteHoldsTheWrite(t *testing.T, env *natstest.Env) {
	ctx := context.Background()
	s := store.New(env.Buckets.Status, newStatus)
	for i := range 150 {
		key := fmt.Sprintf("list-after-write-%d", i)
		if _, err := s.Create(ctx, key, &sluicev1.NodeStatus{Node: key}); err != nil {
			t.Fatal(err)
		}
		all, err := s.List(ctx, ">")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(all, func(e store.Entry[*sluicev1.NodeStatus]) bool { return e.Key == key }) {
			t.Fatalf("write %d: a listing right after it does not hold %s (%d entries)", i, key, len(all))
		}
	}
}
