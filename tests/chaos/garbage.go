package chaos

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The garbage-value fault: raw Puts (no compare-and-set) of values that are
// not well-formed for their keys — valid JSON of another type, a value cut
// short, nothing — into existing and fresh keys of every bucket, as a bug
// or an attacker with write access would make them. The product quarantines
// such values at intake (pkg/store, pkg/contract/wellformed): nothing acts
// on them. The harness records every write (Spoil), with the value the key
// held before, so that the checker judges a key that still holds garbage at
// rest by what its owner stored there last.

// garbageCandidates are the foreign values a Foreign write tries, in turn
// from its From; one more, last, is a value copied from a key of another
// bucket (another message type, really written by sluice). The first that
// is not well-formed for the key is written: a value the product accepts
// is not garbage to it, and is logged instead (the product's rules decide).
var garbageCandidates = []struct {
	name  string
	value string
}{
	{"a leader fence", `{"holder":"chaos","epoch":"5"}`}, // issue 19's example
	{"another node's status", `{"node":"chaos-node","phase":"NODE_PHASE_PROVISIONED","fingerprint":"c0ffee"}`},
	{"a rollout record", `{"id":"0-chaos","phase":"ROLLOUT_PHASE_SUCCEEDED","revision":"c0ffee"}`},
	{"a JSON array", `[1,2,3]`},
}

// Spoil is one garbage value the harness wrote.
type Spoil struct {
	Bucket, Key string
	Revision    uint64 // the garbage's KV revision
	At          time.Time
	What        string // what was written: "empty", "truncated …", "foreign: …"
	Fresh       bool   // the key held nothing before
	// Before is the last well-formed value the key held before (its
	// owner's last write), nil if none.
	Before proto.Message
	// AtRest: the key still held this garbage when the system was observed
	// at rest (nobody rewrote it).
	AtRest bool
	// Stale: a well-formed value a deposed leader could have written
	// (stale-desired), not garbage: sluice reads it, and must ignore it.
	Stale bool
}

func (sp Spoil) String() string {
	return fmt.Sprintf("%s/%s revision %d (%s)", sp.Bucket, sp.Key, sp.Revision, sp.What)
}

// spoils is the harness's record of its garbage writes.
type spoils struct {
	mu   sync.Mutex
	list []Spoil
}

func (s *spoils) add(sp Spoil) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, sp)
}

// at is the spoil that wrote bucket/key at revision rev, or nil.
func (s *spoils) at(bucket, key string, rev uint64) *Spoil {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.list {
		if sp := &s.list[i]; sp.Bucket == bucket && sp.Key == key && sp.Revision == rev {
			c := *sp
			return &c
		}
	}
	return nil
}

// spoiledFresh reports whether the harness wrote garbage into key of
// bucket while it held nothing: a key no sluice component owns.
func (s *system) spoiledFresh(bucket, key string) bool {
	s.spoiled.mu.Lock()
	defer s.spoiled.mu.Unlock()
	return slices.ContainsFunc(s.spoiled.list, func(sp Spoil) bool { return sp.Bucket == bucket && sp.Key == key && sp.Fresh })
}

func (s *spoils) all() []Spoil {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// typeFor is an empty value of the message bucket/key holds (the layout of
// contract's bucket comments and pkg/contract/wellformed). A key that holds
// no value (a fence check key, a key of no known layout) gets a Fence: any
// value there is unreadable.
func typeFor(bucket, key string) proto.Message {
	if contract.IsControlKey(key) {
		return &sluicev1.Fence{}
	}
	switch bucket {
	case contract.BucketIntents:
		return &sluicev1.StoredIntent{}
	case contract.BucketRevisions:
		switch key {
		case contract.KeyHead:
			return &sluicev1.Head{}
		case contract.KeyPending:
			return &sluicev1.ApplyJournal{}
		}
		return &sluicev1.Revision{}
	case contract.BucketNodeConfigs:
		return &sluicev1.DesiredConfig{}
	case contract.BucketFingerprints:
		return &sluicev1.InvalidFingerprint{}
	case contract.BucketStatus:
		return &sluicev1.NodeStatus{}
	case contract.BucketNodes:
		return &sluicev1.NodePresence{}
	case contract.BucketRollouts:
		if key == contract.KeyActive || key == contract.KeyLastApplied {
			return &sluicev1.RolloutRef{}
		}
		return &sluicev1.Rollout{}
	case contract.BucketLeases:
		return &sluicev1.LeaderLease{}
	case contract.BucketInstances:
		return &sluicev1.Instance{}
	case contract.BucketRegistries:
		return &sluicev1.RegistryStatus{}
	case contract.BucketControl:
		if key == contract.KeyReapConfirm {
			return &sluicev1.ReapConfirm{}
		}
		if _, spec, ok := contract.RegistryOfKey(key); ok {
			if spec {
				return &sluicev1.RegistrySpec{}
			}
			return &sluicev1.RegistryConfirm{}
		}
		switch prefix, _, _ := strings.Cut(key, "."); prefix {
		case contract.KeyPause:
			return &sluicev1.PauseRequest{}
		case "abort":
			return &sluicev1.AbortRequest{}
		case "forgive":
			return &sluicev1.ForgiveRequest{}
		}
	}
	return &sluicev1.Fence{}
}

// wellFormed reports whether data is a value sluice accepts at bucket/key.
func wellFormed(bucket, key string, data []byte) bool {
	return store.Decode(bucket, key, data, typeFor(bucket, key)) == nil
}

// decodeAs decodes data as bucket/key's message, nil if it is not well-formed.
func decodeAs(bucket, key string, data []byte) proto.Message {
	v := typeFor(bucket, key)
	if data == nil || store.Decode(bucket, key, data, v) != nil {
		return nil
	}
	return v
}

// freshKey is fresh key n of bucket: one no sluice component wrote, shaped
// like the bucket's keys (a node, a rollout, a fingerprint …) so that a
// reader that went by the key alone would take it for one.
func freshKey(bucket string, n uint32) string {
	hash := func() string {
		h := sha256.Sum256(fmt.Appendf(nil, "chaos-%d", n))
		return hex.EncodeToString(h[:])
	}
	switch bucket {
	case contract.BucketIntents:
		return fmt.Sprintf("routingtable.chaos-%d", n)
	case contract.BucketRevisions, contract.BucketFingerprints:
		return hash()
	case contract.BucketNodeConfigs:
		return []func(string) string{contract.DesiredKey, contract.BackupKey}[n%2](fmt.Sprintf("chaos-node-%d", n))
	case contract.BucketStatus, contract.BucketNodes:
		return fmt.Sprintf("chaos-node-%d", n)
	case contract.BucketRollouts:
		return contract.RolloutID(uint64(900+n), hash())
	case contract.BucketControl:
		return []string{contract.AbortKey(contract.RolloutID(uint64(900+n), hash())), contract.RolloutPauseKey(contract.RolloutID(uint64(900+n), hash())),
			contract.ForgiveKey(hash()), contract.RegistryKey(fmt.Sprintf("chaos-%d", n))}[n%4]
	case contract.BucketInstances:
		return contract.InstanceKey("agent", fmt.Sprintf("chaos-node-%d", n))
	}
	return fmt.Sprintf("chaos-%d", n)
}

// garbage runs a garbage-value fault: its writes, in order.
func (f *faults) garbage(ctx context.Context, ft Fault) {
	for _, g := range ft.Garbage {
		if err := f.sys.spoil(ctx, g); err != nil {
			f.sys.log.add("%s: %s not written: %v", ft.Kind, g, err)
		}
	}
	// Garbage over pause-plane's resume would hold the plane paused for
	// good, and a rollout that cannot end while paused keeps the faults from
	// being done: the resume is written over it one second later (time for
	// the instances to see the garbage), as an operator seeing the
	// ValueUnreadable events would (seed 762). Garbage before or during a
	// pause is written over by pause-plane's own writes.
	f.mu.Lock()
	resumed := f.resumed
	f.mu.Unlock()
	if resumed {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		f.resumeOverGarbage(ctx)
	}
}

// spoil makes one garbage write, retried while the servers do not answer
// (retry), and records it.
func (s *system) spoil(ctx context.Context, g GarbageWrite) error {
	// lost is an attempt whose answer never came (a server stopped under
	// it): it may have landed, and garbage nobody recorded is judged as
	// the owner's value (seed 75, secured: node-02's desired key got the
	// write the harness retried on node-04's, and the check blamed the
	// coordinator). It is looked for before the next attempt.
	var lost *spoilWrite
	return retry(ctx, func(ctx context.Context) error {
		kv := bucketKV(s.Env().Buckets, g.Bucket)
		if lost != nil {
			rev, err := s.landedAt(ctx, kv, lost)
			if err != nil {
				return err
			}
			if rev > 0 {
				s.recordSpoil(g, *lost, rev)
				return nil
			}
			lost = nil
		}
		key, before, beforeRev, err := s.garbageKey(ctx, kv, g)
		if err != nil {
			return err
		}
		value, what, err := s.garbageValue(ctx, kv, key, before, g)
		if err != nil {
			return err
		}
		// Written over exactly the value read (compare-and-set on its
		// revision, Create for a fresh key), so that before is what the
		// garbage replaced: an owner's write landing in between makes the
		// write fail, and it is tried again on what the owner wrote. To
		// sluice it is the same foreign write as a plain Put. (With a Put,
		// a terminal record written in those milliseconds was erased, and
		// the key was judged by the running record before it: seed 19.)
		w := spoilWrite{key: key, value: value, what: what, before: before, beforeRev: beforeRev, at: time.Now()}
		pctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		var rev uint64
		if beforeRev == 0 {
			rev, err = kv.Create(pctx, key, value) // never written
		} else {
			rev, err = kv.Update(pctx, key, value, beforeRev) // live, or its delete marker
		}
		cancel()
		if err != nil {
			lost = &w
			return fmt.Errorf("write %s/%s over revision %d: %w", g.Bucket, key, beforeRev, err)
		}
		w.at = time.Now()
		s.recordSpoil(g, w, rev)
		return nil
	})
}

// spoilWrite is one attempt at a garbage write: value (described by what)
// over key's value before, at beforeRev.
type spoilWrite struct {
	key, what     string
	value, before []byte
	beforeRev     uint64
	at            time.Time // when it landed (for a lost answer: when it was sent)
}

// landedAt is the revision at which write l, whose answer was lost, landed, 0 if it did not: the
// first message on its key after the value it was written over, if it
// holds the garbage (an owner's write after it is no evidence either way,
// but the garbage compare-and-set only over beforeRev, so it is the next
// message on the key or none).
func (s *system) landedAt(ctx context.Context, kv jetstream.KeyValue, l *spoilWrite) (uint64, error) {
	m, err := s.leaderMsg(ctx, kv, map[string]any{"seq": l.beforeRev + 1, "next_by_subj": kvSubject(kv, l.key)})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if !m.deleted && bytes.Equal(m.data, l.value) {
		return m.seq, nil
	}
	return 0, nil
}

// recordSpoil records g's write w, landed at rev.
func (s *system) recordSpoil(g GarbageWrite, w spoilWrite, rev uint64) {
	sp := Spoil{Bucket: g.Bucket, Key: w.key, Revision: rev, At: w.at, What: w.what, Fresh: w.before == nil, Before: decodeAs(g.Bucket, w.key, w.before)}
	if prev := s.spoiled.at(g.Bucket, w.key, w.beforeRev); prev != nil && sp.Before == nil {
		sp.Before = prev.Before // the key held an earlier garbage value: its owner's value is older
	}
	s.spoiled.add(sp)
	s.log.add("garbage-value: wrote %s", sp)
}

// garbageKey finds g's key: fresh, or the Pick-th of the bucket's live
// keys (from the stream's leader), with its current value and revision.
func (s *system) garbageKey(ctx context.Context, kv jetstream.KeyValue, g GarbageWrite) (string, []byte, uint64, error) {
	if !g.Fresh {
		keys, err := s.leaderKeys(ctx, kv)
		if err != nil {
			return "", nil, 0, err
		}
		for i := range keys {
			key := keys[(int(g.Pick)+i)%len(keys)]
			m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return "", nil, 0, err
			}
			if !m.deleted {
				return key, m.data, m.seq, nil
			}
		}
	}
	key := freshKey(g.Bucket, g.Pick)
	m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return key, nil, 0, nil
	case err != nil:
		return "", nil, 0, err
	case m.deleted:
		return key, nil, m.seq, nil
	}
	return key, m.data, m.seq, nil
}

// garbageValue makes g's value for key (which holds before): one that is
// not well-formed there.
func (s *system) garbageValue(ctx context.Context, kv jetstream.KeyValue, key string, before []byte, g GarbageWrite) ([]byte, string, error) {
	switch g.Value {
	case Empty:
		return []byte{}, "empty", nil
	case Truncated:
		v := before
		if len(v) < 2 {
			v = []byte(garbageCandidates[g.From%len(garbageCandidates)].value)
		}
		cut := len(v) / 2
		return v[:cut], fmt.Sprintf("truncated to %d of %d bytes", cut, len(v)), nil
	}
	n := len(garbageCandidates) + 1
	for i := range n {
		c := (g.From + i) % n
		name, value := "", []byte(nil)
		if c < len(garbageCandidates) {
			name, value = garbageCandidates[c].name, []byte(garbageCandidates[c].value)
		} else {
			var err error
			if name, value, err = s.otherValue(ctx, kv.Bucket(), g.Pick); err != nil {
				return nil, "", err
			}
			if value == nil {
				continue
			}
		}
		if wellFormed(kv.Bucket(), key, value) {
			// The product's rules take it as a value of this key: it is no
			// garbage to sluice, and writing it would test something else.
			s.log.add("garbage-value: %s would be well-formed at %s/%s: not written", name, kv.Bucket(), key)
			continue
		}
		return value, "foreign: " + name, nil
	}
	return []byte{}, "empty (every foreign value was well-formed there)", nil
}

// otherValue is a live value of a bucket other than bucket, picked by pick:
// a value of another message, really written by sluice. nil if the bucket
// drawn holds none.
func (s *system) otherValue(ctx context.Context, bucket string, pick uint32) (string, []byte, error) {
	others := slices.DeleteFunc(slices.Clone(garbageBuckets), func(b string) bool { return b == bucket })
	from := others[int(pick)%len(others)]
	kv := bucketKV(s.Env().Buckets, from)
	keys, err := s.leaderKeys(ctx, kv)
	if err != nil {
		return "", nil, err
	}
	for _, key := range keys {
		if contract.IsControlKey(key) {
			continue
		}
		m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		if !m.deleted && wellFormed(from, key, m.data) {
			return fmt.Sprintf("the value of %s/%s", from, key), m.data, nil
		}
	}
	return "", nil, nil
}

// bucketKV is b's handle of bucket name.
func bucketKV(b *buckets.Set, name string) jetstream.KeyValue {
	return map[string]jetstream.KeyValue{
		contract.BucketIntents: b.Intents, contract.BucketRevisions: b.Revisions, contract.BucketNodeConfigs: b.NodeConfigs,
		contract.BucketFingerprints: b.Fingerprints, contract.BucketStatus: b.Status, contract.BucketNodes: b.Nodes,
		contract.BucketRollouts: b.Rollouts, contract.BucketLeases: b.Leases, contract.BucketControl: b.Control,
		contract.BucketInstances: b.Instances, contract.BucketRegistries: b.Registries,
	}[name]
}
