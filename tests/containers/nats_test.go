//go:build containers

package containers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// watchedBuckets are the buckets whose writes the NATS scenario follows:
// what the configurator, the coordinator and the agents acknowledge while a
// server is down.
var watchedBuckets = []string{contract.BucketIntents, contract.BucketRevisions, contract.BucketNodeConfigs, contract.BucketRollouts, contract.BucketStatus}

// testNATSServerKilled kills the NATS server leading the rollouts bucket's
// stream (SIGKILL) while the rollout runs, lets the rollout carry on with
// two servers of three, then starts the server again: the rollout succeeds,
// the intents applied are stored as applied, and every write the host saw
// acknowledged — each key at the revision seen or later — is on all three
// servers once the killed one has caught up.
func testNATSServerKilled(t *testing.T, c *cluster) {
	seen := c.watchWrites(t, watchedBuckets...)
	a := c.apply(t, intentsWith(t, 420), &sluicev1.Strategy{MaxParallel: "1", FailureDomain: "zone", PickupDeadline: oneAtATime().GetPickupDeadline()})
	r := c.waitRollout(t, a.rollout, rolloutTimeout, "one node provisioned", running(1))

	victim := c.streamLeader(t, contract.StreamOfBucket(contract.BucketRollouts))
	killed := time.Now()
	c.kill(t, victim)
	before := r.GetCounts().GetProvisioned()
	r = c.waitRollout(t, a.rollout, rolloutTimeout, fmt.Sprintf("a node provisioned with %s down", victim), func(r *sluicev1.Rollout) bool {
		return r.GetCounts().GetProvisioned() > before || contract.Terminal(r.GetPhase())
	})
	t.Logf("with %s killed, the rollout went on: %d of %d nodes provisioned %s after the kill",
		victim, r.GetCounts().GetProvisioned(), r.GetCounts().GetTotal(), time.Since(killed).Round(10*time.Millisecond))
	c.start(t, victim) // ready once current with the cluster's JetStream (/healthz)
	t.Logf("%s back and current %s after the kill", victim, time.Since(killed).Round(10*time.Millisecond))

	r = c.waitEnd(t, a.rollout, rolloutTimeout)
	c.assertSucceeded(t, r, allNodes()...)
	c.assertInvariants(t, r)
	c.assertApplied(t, a)
	c.assertWritesKept(t, seen())
}

// streamLeader names the NATS server leading stream.
func (c *cluster) streamLeader(t *testing.T, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != len(natsNames)-1 {
		t.Fatalf("stream %s is not R%d with a leader: %+v", stream, len(natsNames), info.Cluster)
	}
	return info.Cluster.Leader
}

// write is the last write of a key a watcher saw.
type write struct {
	revision uint64
	deleted  bool // a delete (or purge) marker
}

// watchWrites follows buckets from the host and returns what it has seen
// so far: per bucket, each key's last write. A watcher only sees what the
// stream stored, so each of them was an acknowledged write.
func (c *cluster) watchWrites(t *testing.T, buckets ...string) func() map[string]map[string]write {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	seen := map[string]map[string]write{}
	for _, bucket := range buckets {
		kv, err := c.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly())
		if err != nil {
			t.Fatalf("watch %s: %v", bucket, err)
		}
		seen[bucket] = map[string]write{}
		go func() {
			for e := range w.Updates() {
				if e == nil {
					continue
				}
				mu.Lock()
				if e.Revision() > seen[bucket][e.Key()].revision {
					seen[bucket][e.Key()] = write{revision: e.Revision(), deleted: e.Operation() != jetstream.KeyValuePut}
				}
				mu.Unlock()
			}
		}()
	}
	return func() map[string]map[string]write {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]map[string]write{}
		for b, keys := range seen {
			out[b] = maps.Clone(keys)
		}
		return out
	}
}

// assertApplied checks that what apply a stored is still stored: its
// revision, and each of its intents as it was sent, not marked for deletion.
func (c *cluster) assertApplied(t *testing.T, a applied) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.b.Revisions.Get(ctx, a.revision); err != nil {
		t.Errorf("revision %.12s of the acknowledged apply: %v", a.revision, err)
	}
	intents := store.New(c.b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	for _, in := range a.intents {
		e, err := intents.Get(ctx, intent.Key(in))
		if err != nil {
			t.Errorf("intent %s of the acknowledged apply: %v", intent.Key(in), err)
			continue
		}
		if e.Value.GetMarkedForDeletion() || !proto.Equal(e.Value.GetIntent(), in) {
			t.Errorf("intent %s: stored %v, marked for deletion %v; applied %v", intent.Key(in), e.Value.GetIntent(), e.Value.GetMarkedForDeletion(), in)
		}
	}
}

// assertWritesKept checks every write seen against the buckets and every
// server: each key still at the revision seen or a later one (a key seen
// deleted still deleted), and each bucket's stream on every server (the
// restarted one too) at the same last sequence, at least the highest
// revision seen.
func (c *cluster) assertWritesKept(t *testing.T, seen map[string]map[string]write) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writes := 0
	for _, bucket := range slices.Sorted(maps.Keys(seen)) {
		kv, err := c.js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		for key, w := range seen[bucket] {
			writes++
			e, err := kv.Get(ctx, key)
			switch {
			case w.deleted && (errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)):
			case (errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)) && deletedAfter(ctx, kv, key, w.revision):
				// Deleted by a write after the one seen (the coordinator
				// removes rollouts/active once the rollout ended), which
				// the watcher had not delivered yet: not a lost write.
			case err != nil:
				t.Errorf("%s/%s, written at revision %d, is gone: %v", bucket, key, w.revision, err)
			case e.Revision() < w.revision || (w.deleted && e.Revision() == w.revision):
				t.Errorf("%s/%s is at revision %d; the write acknowledged was revision %d (deleted: %v)", bucket, key, e.Revision(), w.revision, w.deleted)
			}
		}
	}
	var last map[string]map[string]uint64 // server → stream → last sequence
	eventually(t, time.Minute, "every server to hold every write", func() bool {
		last = map[string]map[string]uint64{}
		for _, name := range natsNames {
			seqs, err := c.streamSeqs(ctx, name)
			if err != nil {
				return false
			}
			last[name] = seqs
		}
		for bucket, keys := range seen {
			stream := contract.StreamOfBucket(bucket)
			var highest uint64
			for _, w := range keys {
				highest = max(highest, w.revision)
			}
			for _, name := range natsNames {
				if last[name][stream] < highest || last[name][stream] != last[natsNames[0]][stream] {
					return false
				}
			}
		}
		return true
	})
	t.Logf("%d keys written while the test watched, each still there at its revision or later; every server's copy of %v at the same last sequence: %v",
		writes, watchedBuckets, last[natsNames[0]])
}

// streamSeqs is each stream's last sequence as server name stores it
// (its monitoring endpoint's /jsz).
func (c *cluster) streamSeqs(ctx context.Context, name string) (map[string]uint64, error) {
	base, err := c.monitorURL(ctx, name)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/jsz?accounts=true&streams=true", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq uint64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return nil, fmt.Errorf("%s /jsz: %w", name, err)
	}
	out := map[string]uint64{}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			out[s.Name] = s.State.LastSeq
		}
	}
	return out, nil
}

// deletedAfter reports whether key's last message is a delete or purge
// marker stored after revision rev.
func deletedAfter(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) bool {
	hist, err := kv.History(ctx, key)
	if err != nil || len(hist) == 0 {
		return false
	}
	last := hist[len(hist)-1]
	return last.Operation() != jetstream.KeyValuePut && last.Revision() > rev
}
