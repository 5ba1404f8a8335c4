package dashboard

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// countingJS counts every bucket bound through it and every read of a
// bucket bound so: what a store check asks of JetStream.
type countingJS struct {
	jetstream.JetStream
	reads *atomic.Int64
}

func (c countingJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	c.reads.Add(1)
	kv, err := c.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return countingKV{kv, c.reads}, nil
}

type countingKV struct {
	jetstream.KeyValue
	reads *atomic.Int64
}

func (c countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.reads.Add(1)
	return c.KeyValue.Get(ctx, key)
}

func (c countingKV) GetRevision(ctx context.Context, key string, rev uint64) (jetstream.KeyValueEntry, error) {
	c.reads.Add(1)
	return c.KeyValue.GetRevision(ctx, key, rev)
}

func (c countingKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	c.reads.Add(1)
	return c.KeyValue.Keys(ctx, opts...)
}

func (c countingKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	c.reads.Add(1)
	return c.KeyValue.ListKeys(ctx, opts...)
}

func (c countingKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	c.reads.Add(1)
	return c.KeyValue.ListKeysFiltered(ctx, filters...)
}

func (c countingKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	c.reads.Add(1)
	return c.KeyValue.Watch(ctx, keys, opts...)
}

func (c countingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	c.reads.Add(1)
	return c.KeyValue.WatchAll(ctx, opts...)
}

func (c countingKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	c.reads.Add(1)
	return c.KeyValue.WatchFiltered(ctx, keys, opts...)
}

// TestCheckStore_CostsNoReadWhileNothingSaysLost: the dashboard's store
// check, run 100 times on a fresh install of 500 nodes that run nothing
// yet, reads nothing (the watches already hold the evidence); with 3
// nodes naming a revision the empty store does not hold, one Get per
// check, whatever the fleet's size, and the banner names them; once a
// rollout is recorded, nothing again and no banner.
func TestCheckStore_CostsNoReadWhileNothingSaysLost(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	const fleet, checks = 500, 100
	presences := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	for i := range fleet {
		n := fmt.Sprintf("node-%03d", i)
		if _, err := presences.Create(ctx, n, &sluicev1.NodePresence{Node: n, HeartbeatAt: timestamppb.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	s := newState()
	followCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); s.follow(followCtx, env.JS, time.Hour, t.Logf) }()
	defer func() { cancel(); <-done }()
	until := func(what string, f func() bool) {
		t.Helper()
		natstest.Eventually(t, 10*time.Second, what, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return f() })
	}
	until("the watches to read every node", func() bool {
		return s.ready[contract.BucketNodes] && s.ready[contract.BucketRollouts] && s.ready[contract.BucketControl] && len(s.presences) == fleet
	})
	var reads atomic.Int64
	js := countingJS{env.JS, &reads}
	run := func(what string) (int64, string) {
		t.Helper()
		reads.Store(0)
		for range checks {
			if err := s.checkStore(ctx, js); err != nil {
				t.Fatalf("%s: checkStore: %v", what, err)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return reads.Load(), s.storeLoss
	}

	if n, banner := run("a fresh install"); n != 0 || banner != "" {
		t.Errorf("a fresh install of %d nodes: %d reads in %d checks, banner %q; want none", fleet, n, checks, banner)
	}

	const rev = "110b0b1c2d3e4f5a"
	for _, n := range []string{"node-001", "node-002", "node-003"} {
		e, err := presences.Get(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := presences.Update(ctx, n, &sluicev1.NodePresence{Node: n, InForceRevision: rev, HeartbeatAt: timestamppb.Now()}, e.Revision); err != nil {
			t.Fatal(err)
		}
	}
	until("the watch to see 3 nodes run "+rev, func() bool { return s.inForce[rev] == 3 })
	n, banner := run("a lost store")
	// One bind of the revisions bucket, then one Get per check.
	if n != checks+1 || !strings.Contains(banner, "the store is empty but 3 nodes run configs of revision 110b0b1c2d3e") {
		t.Errorf("a lost store: %d reads in %d checks (want %d), banner %q", n, checks, checks+1, banner)
	}

	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	if _, err := rollouts.Create(ctx, "1-110b0b1c2d3e", &sluicev1.Rollout{Id: "1-110b0b1c2d3e", Revision: rev}); err != nil {
		t.Fatal(err)
	}
	until("the watch to see the rollout", func() bool { return len(s.rollouts) == 1 })
	if n, banner := run("a recorded rollout"); n != 0 || banner != "" {
		t.Errorf("a store that records a rollout: %d reads in %d checks, banner %q; want none", n, checks, banner)
	}
}
