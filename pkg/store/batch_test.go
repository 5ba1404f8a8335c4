package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func newDesired() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }

// desiredOf is a well-formed desired config of node, told apart by its
// revision tag (its config and fingerprint follow from it).
func desiredOf(node, tag string) *sluicev1.DesiredConfig {
	cfg := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{Name: tag}}}
	return &sluicev1.DesiredConfig{Node: node, Revision: tag, Config: cfg, Fingerprint: render.Fingerprint(cfg)}
}

// TestBatcher_Fenced runs on R1 and on a 3-node cluster: a batch lands whole
// or not at all, every op is compare-and-set, and a moved fence rejects it.
func TestBatcher_Fenced(t *testing.T) {
	s := contract.DefaultSettings()
	for _, backend := range []string{"R1", "R3"} {
		t.Run(backend, func(t *testing.T) {
			var env *natstest.Env
			if backend == "R1" {
				env = natstest.Start(t, s)
			} else {
				env = natstest.StartCluster(t, 3, s).Env
			}
			// margin: only bounds a hang; every call returns with its answer.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// Reads go through latest: on R3 a Get may come from a replica
			// that has not caught up with the write just made.
			st := store.New(env.Buckets.NodeConfigs, newDesired)
			fences := store.New(env.Buckets.NodeConfigs, func() *sluicev1.Fence { return &sluicev1.Fence{} })
			b := store.NewBatcher(env.Conn, contract.BucketNodeConfigs)
			fenceRev, err := fences.Create(ctx, contract.KeyFence, &sluicev1.Fence{Epoch: 1, Holder: "a"})
			if err != nil {
				t.Fatal(err)
			}
			fence := &store.Fence{Key: contract.KeyFence, Check: contract.KeyFence + ".check", Revision: fenceRev}

			revs, err := b.Write(ctx, []store.Op{
				{Key: "n1.backup", Value: desiredOf("n1", "old")},
				{Key: "n1.desired", Value: desiredOf("n1", "new")},
			}, fence)
			if err != nil {
				t.Fatalf("first batch: %v", err)
			}
			got, err := latest(t, env, st, "n1.desired")
			if err != nil || got.Value.GetRevision() != "new" || got.Revision != revs[1] {
				t.Fatalf("n1.desired = %v rev %d (%v); want fingerprint new at rev %d", got.Value, got.Revision, err, revs[1])
			}
			if bk, _ := latest(t, env, st, "n1.backup"); bk.Revision != revs[0] {
				t.Fatalf("n1.backup rev %d, want %d", bk.Revision, revs[0])
			}

			// One stale op fails the whole batch: the backup is not written either.
			_, err = b.Write(ctx, []store.Op{
				{Key: "n1.backup", Value: desiredOf("n1", "x"), Revision: revs[0]},
				{Key: "n1.desired", Value: desiredOf("n1", "x"), Revision: revs[1] - 1},
			}, fence)
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("stale op: err = %v, want ErrConflict", err)
			}
			if bk, _ := latest(t, env, st, "n1.backup"); bk.Value.GetRevision() != "old" {
				t.Fatalf("a rejected batch wrote the backup: %v", bk.Value)
			}

			// A new term moves the fence: the old term's batch is rejected.
			if _, err := fences.Update(ctx, contract.KeyFence, &sluicev1.Fence{Epoch: 2, Holder: "b"}, fenceRev); err != nil {
				t.Fatal(err)
			}
			_, err = b.Write(ctx, []store.Op{{Key: "n1.desired", Value: desiredOf("n1", "stale"), Revision: revs[1]}}, fence)
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("deposed write: err = %v, want ErrConflict", err)
			}
			if d, _ := latest(t, env, st, "n1.desired"); d.Value.GetRevision() != "new" {
				t.Fatalf("a deposed leader's write landed: %v", d.Value)
			}

			// A single fenced message lands while the fence holds, never after it moved.
			newFence, _ := latest(t, env, fences, contract.KeyFence)
			cur := &store.Fence{Key: contract.KeyFence, Check: fence.Check, Revision: newFence.Revision}
			rev, err := b.WriteFenced(ctx, store.Op{Key: "n2.desired", Value: desiredOf("n2", "ok")}, cur)
			if err != nil {
				t.Fatalf("fenced write under the current fence: %v", err)
			}
			if d, _ := latest(t, env, st, "n2.desired"); d.Revision != rev {
				t.Fatalf("n2.desired rev %d, want %d", d.Revision, rev)
			}
			if _, err := b.WriteFenced(ctx, store.Op{Key: "n3.desired", Value: &sluicev1.DesiredConfig{Node: "n3"}}, fence); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("fenced write under a moved fence: err = %v, want ErrConflict", err)
			}
			if _, err := latest(t, env, st, "n3.desired"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a write under a moved fence landed: %v", err)
			}

			// A delete in a batch.
			if _, err := b.Write(ctx, []store.Op{{Key: "n1.backup", Revision: revs[0]}}, nil); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if _, err := latest(t, env, st, "n1.backup"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after a batch delete: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestBatcher_ConcurrentFencedWrites: many writers of one leader check the
// same fence at once. On a cluster the server lets one write per checked key
// be in flight and refuses the others (JetStream 10164) although the fence
// never moved; every write must still land (found by the chaos suite as
// desired configs retried for seconds on R3 after every term started).
func TestBatcher_ConcurrentFencedWrites(t *testing.T) {
	s := contract.DefaultSettings()
	for _, backend := range []string{"R1", "R3"} {
		t.Run(backend, func(t *testing.T) {
			var env *natstest.Env
			if backend == "R1" {
				env = natstest.Start(t, s)
			} else {
				env = natstest.StartCluster(t, 3, s).Env
			}
			// margin: only bounds a hang; every call returns with its answer.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			fences := store.New(env.Buckets.NodeConfigs, func() *sluicev1.Fence { return &sluicev1.Fence{} })
			fenceRev, err := fences.Create(ctx, contract.KeyFence, &sluicev1.Fence{Epoch: 1, Holder: "a"})
			if err != nil {
				t.Fatal(err)
			}
			fence := &store.Fence{Key: contract.KeyFence, Check: contract.KeyFence + ".check", Revision: fenceRev}
			b := store.NewBatcher(env.Conn, contract.BucketNodeConfigs)
			const writers = 64
			errs := make(chan error, 2*writers)
			for i := range writers {
				go func() {
					key := fmt.Sprintf("n%d", i)
					_, err := b.WriteFenced(ctx, store.Op{Key: key + ".desired", Value: &sluicev1.DesiredConfig{Node: key}}, fence)
					errs <- err
					_, err = b.Write(ctx, []store.Op{{Key: key + ".backup", Value: &sluicev1.DesiredConfig{Node: key}}}, fence)
					errs <- err
				}()
			}
			for range 2 * writers {
				if err := <-errs; err != nil {
					t.Errorf("a fenced write under the current fence failed: %v", err)
				}
			}
		})
	}
}

// TestBatcher_Last: the leader's last message of a key, and whether it is a
// value or a delete/purge marker.
func TestBatcher_Last(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	b := store.NewBatcher(env.Conn, contract.BucketNodeConfigs)
	kv := env.Buckets.NodeConfigs
	check := func(what, key string, wantLive bool, wantRev uint64) {
		t.Helper()
		rev, live, err := b.Last(ctx, key)
		if err != nil || live != wantLive || rev != wantRev {
			t.Fatalf("%s: rev %d, live %v, %v; want rev %d, live %v", what, rev, live, err, wantRev, wantLive)
		}
	}
	check("never written", "n1.desired", false, 0)
	rev, err := kv.Put(ctx, "n1.desired", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	check("written", "n1.desired", true, rev)
	if err := kv.Delete(ctx, "n1.desired"); err != nil {
		t.Fatal(err)
	}
	check("deleted", "n1.desired", false, rev+1)
	if _, err := kv.Put(ctx, "n2.desired", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "n2.desired"); err != nil {
		t.Fatal(err)
	}
	if _, live, err := b.Last(ctx, "n2.desired"); err != nil || live {
		t.Fatalf("purged: live %v, %v; want not live", live, err)
	}
}
