// Package store keeps protobuf values in a JetStream KV bucket as protojson,
// so `nats kv get` shows readable JSON, and makes every write compare-and-set.
package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/codec"
	"github.com/sluicehq/sluice/pkg/contract/wellformed"
)

// unmarshal is the lenient decode, for values with fields this version
// does not know; Marshal and the strict decode are pkg/codec's protojson.
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// Marshal encodes a value the way every bucket stores it: protojson
// (pkg/codec).
func Marshal(m proto.Message) ([]byte, error) { return codec.Marshal(m) }

// Unmarshal decodes a stored value, ignoring fields newer versions added.
// It does not check the value against its key: Decode does.
func Unmarshal(b []byte, m proto.Message) error { return unmarshal.Unmarshal(b, m) }

// Decode decodes b, the value of bucket/key read outside a Store (a
// republished write), into m and checks it as a Store's reads do: an error
// matching ErrUndecodable says why the value is not usable.
//
// A value is decoded strictly first (what this version writes has no field
// it does not know): only one with unknown fields pays for a second, lenient
// decode, which keeps a newer version's value readable, and for the check
// that none of them is another stored type's field (wellformed.Foreign).
func Decode(bucket, key string, b []byte, m proto.Message) error {
	if codec.Unmarshal(b, m) != nil {
		proto.Reset(m)
		if err := unmarshal.Unmarshal(b, m); err != nil {
			return fmt.Errorf("decode %s/%s: %w: %w", bucket, key, ErrUndecodable, err)
		}
		if wellformed.Known(bucket) {
			if err := wellformed.Foreign(m, b); err != nil {
				return fmt.Errorf("decode %s/%s: %w: not well-formed for its key: %w", bucket, key, ErrUndecodable, err)
			}
		}
	}
	if err := wellformed.Check(bucket, key, m); err != nil {
		return fmt.Errorf("decode %s/%s: %w: not well-formed for its key: %w", bucket, key, ErrUndecodable, err)
	}
	return nil
}

// Entry is one decoded value with the revision a CAS write must name.
type Entry[T proto.Message] struct {
	Key      string
	Value    T // nil-valued (zero T) for delete and purge operations
	Revision uint64
	Created  time.Time
	Deleted  bool  // the key was deleted, purged or expired
	Err      error // the stored value did not decode (Value is zero)
}

// Store is a typed view of one bucket. Every value it reads is checked
// against the bucket's rules (pkg/contract/wellformed, looked up by the
// bucket's name): one that fails is handed out as undecodable, never as a
// value, so no reader can forget the check.
type Store[T proto.Message] struct {
	kv   jetstream.KeyValue
	newT func() T
	// nc, when set (Direct), carries Create and Update as one request of
	// its own (direct.go) instead of through kv.
	nc *nats.Conn
}

// New returns a Store over kv; newT allocates an empty T.
func New[T proto.Message](kv jetstream.KeyValue, newT func() T) *Store[T] {
	return &Store[T]{kv: kv, newT: newT}
}

// Bucket returns the bucket's name.
func (s *Store[T]) Bucket() string { return s.kv.Bucket() }

func (s *Store[T]) decode(e jetstream.KeyValueEntry) (Entry[T], error) {
	out := Entry[T]{Key: e.Key(), Revision: e.Revision(), Created: e.Created()}
	if e.Operation() != jetstream.KeyValuePut {
		out.Deleted = true
		return out, nil
	}
	v := s.newT()
	if err := Decode(s.kv.Bucket(), e.Key(), e.Value(), v); err != nil {
		return out, err
	}
	out.Value = v
	return out, nil
}

// Get returns the value at key, or ErrNotFound.
func (s *Store[T]) Get(ctx context.Context, key string) (Entry[T], error) {
	e, err := read(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return s.kv.Get(ctx, key) })
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Entry[T]{Key: key}, fmt.Errorf("get %s/%s: %w", s.kv.Bucket(), key, ErrNotFound)
	}
	if err != nil {
		return Entry[T]{Key: key}, fmt.Errorf("get %s/%s: %w", s.kv.Bucket(), key, err)
	}
	return s.decode(e)
}

// Create writes key only if it does not exist (or was deleted); ErrConflict otherwise.
func (s *Store[T]) Create(ctx context.Context, key string, v T) (uint64, error) {
	b, err := Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s/%s: %w", s.kv.Bucket(), key, err)
	}
	actx, cancel := attempt(ctx)
	defer cancel()
	if s.nc != nil {
		rev, err := s.put(actx, key, b, 0)
		if !errors.Is(err, errDirectConflict) {
			err = s.wrap("create", key, err)
			observe(ctx, s.kv.Bucket(), err)
			return rev, err
		}
		// The key exists, or its last message is a delete marker, which
		// a create may replace: kv.Create tells the two apart.
	}
	rev, err := s.kv.Create(actx, key, b)
	err = s.wrap("create", key, err)
	observe(ctx, s.kv.Bucket(), err)
	return rev, err
}

// Update writes key only if its current revision is rev; ErrConflict otherwise.
// rev 0 means the key must not exist, as with Create.
func (s *Store[T]) Update(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	if rev == 0 {
		return s.Create(ctx, key, v)
	}
	b, err := Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s/%s: %w", s.kv.Bucket(), key, err)
	}
	actx, cancel := attempt(ctx)
	defer cancel()
	var nrev uint64
	if s.nc != nil {
		nrev, err = s.put(actx, key, b, rev)
	} else {
		nrev, err = s.kv.Update(actx, key, b, rev)
	}
	err = s.wrap("update", key, err)
	observe(ctx, s.kv.Bucket(), err)
	return nrev, err
}

// Delete deletes key only if its current revision is rev; ErrConflict otherwise.
func (s *Store[T]) Delete(ctx context.Context, key string, rev uint64) error {
	actx, cancel := attempt(ctx)
	defer cancel()
	err := s.wrap("delete", key, s.kv.Delete(actx, key, jetstream.LastRevision(rev)))
	observe(ctx, s.kv.Bucket(), err)
	return err
}

// Mutate reads key, lets fn change the value (cur is nil-valued when the key
// does not exist) and writes it back with compare-and-set, retrying fn on a
// conflict. fn returning ErrUnchanged skips the write. It returns the new entry.
func (s *Store[T]) Mutate(ctx context.Context, key string, fn func(cur T) (T, error)) (Entry[T], error) {
	for attempt := 0; ; attempt++ {
		cur, err := s.Get(ctx, key)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return cur, err
		}
		next, err := fn(cur.Value)
		if errors.Is(err, ErrUnchanged) {
			return cur, nil
		}
		if err != nil {
			return cur, err
		}
		rev, err := s.Update(ctx, key, next, cur.Revision)
		if errors.Is(err, ErrConflict) && attempt < 20 {
			if err := conflictBackoff(ctx, attempt); err != nil {
				return cur, fmt.Errorf("mutate %s/%s: %w", s.kv.Bucket(), key, err)
			}
			continue
		}
		if err != nil {
			return cur, err
		}
		return Entry[T]{Key: key, Value: next, Revision: rev}, nil
	}
}

// conflictBackoff waits a random time up to 1ms·2^attempt (at most 50ms)
// before a retry, so that writers racing for one key spread out instead of
// colliding again in lockstep until one of them runs out of attempts.
func conflictBackoff(ctx context.Context, attempt int) error {
	return backoff.Sleep(ctx, conflictRetry.Delay(attempt), nil)
}

// conflictRetry: 1 ms to 50 ms, full jitter: writers racing for one key spread widest; 20 tries stay within a second.
var conflictRetry = backoff.Policy{Base: time.Millisecond, Cap: 50 * time.Millisecond, Jitter: backoff.Full}

// Keys returns every key in the bucket; none is not an error.
func (s *Store[T]) Keys(ctx context.Context) ([]string, error) {
	keys, err := read(ctx, func(ctx context.Context) ([]string, error) { return s.kv.Keys(ctx) })
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.kv.Bucket(), err)
	}
	return keys, nil
}

// List returns every live entry matching the key filter (">" for all), read
// through one watcher so that it costs one round of messages, not one Get per key.
// A value that does not decode is returned with Err set (and a zero Value),
// never failing the whole list: callers quarantine that key and carry on.
func (s *Store[T]) List(ctx context.Context, filter string) ([]Entry[T], error) {
	all, err := s.list(ctx, filter)
	return slices.DeleteFunc(all, func(e Entry[T]) bool { return e.Deleted }), err
}

// ListWithDeleted is List with deleted keys too, as entries with Deleted set
// and the revision of their delete marker: the revision a compare-and-set
// over such a key must name.
func (s *Store[T]) ListWithDeleted(ctx context.Context, filter string) ([]Entry[T], error) {
	return s.list(ctx, filter)
}

func (s *Store[T]) list(ctx context.Context, filter string) ([]Entry[T], error) {
	var floor uint64
	if filter == ">" {
		floor = s.floor(ctx)
	}
	return s.listFrom(ctx, filter, floor)
}

// listFrom lists until the listing reaches revision floor (or
// AttemptTimeout passes: the message at floor may be gone).
func (s *Store[T]) listFrom(ctx context.Context, filter string, floor uint64) ([]Entry[T], error) {
	caughtUp := time.Now().Add(AttemptTimeout)
	for n := 0; ; n++ {
		out, last, err := s.listOnce(ctx, filter)
		if err == nil && (last >= floor || time.Now().After(caughtUp)) {
			return out, nil
		}
		if err != nil && !Unanswered(ctx, err) {
			return out, err
		}
		// Unanswered, or served by a replica that has not caught up with
		// the writes the leader had acknowledged when the listing began.
		if werr := retryPause(ctx, n); werr != nil {
			if err == nil {
				err = fmt.Errorf("list %s: the listing stayed behind revision %d: %w", s.kv.Bucket(), floor, werr)
			}
			return nil, err
		}
	}
}

// floor is the revision a listing of the whole bucket must reach to hold
// every write acknowledged before it began: the last stream sequence, as
// the stream's leader reports it. A watcher's consumer is an R1 consumer
// that the server may place on any replica, and a follower may lag; so on
// a cluster a listing is not read-your-writes unless checked against this.
// 0 (no check) for a bucket whose values expire (its last message may be
// gone) or when the leader does not answer.
func (s *Store[T]) floor(ctx context.Context) uint64 {
	st, err := read(ctx, s.kv.Status)
	if err != nil {
		return 0
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0
	}
	info := bs.StreamInfo()
	if info == nil || info.Config.MaxAge > 0 || info.Config.AllowMsgTTL || info.State.Msgs == 0 {
		return 0
	}
	return info.State.LastSeq
}

// listOnce reads through one watcher, abandoned when AttemptTimeout passes
// without a value (its consumer's creation or a delivery went unanswered).
// It returns the entries, deleted ones included, and the highest revision seen.
func (s *Store[T]) listOnce(ctx context.Context, filter string) ([]Entry[T], uint64, error) {
	wctx, dog := newWatchdog(ctx)
	defer dog.stop()
	fail := func(err error) error {
		if dog.timedOut() {
			err = fmt.Errorf("no answer within %s: %w", AttemptTimeout, context.DeadlineExceeded)
		}
		return fmt.Errorf("list %s: %w", s.kv.Bucket(), err)
	}
	w, err := s.kv.Watch(wctx, filter)
	if err != nil {
		return nil, 0, fail(err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry[T]
	var last uint64
	for {
		select {
		case <-wctx.Done():
			return nil, 0, fail(wctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, 0, fail(errors.New("watcher closed"))
			}
			if e == nil { // initial values delivered
				return out, last, nil
			}
			dog.kick()
			last = max(last, e.Revision())
			d, err := s.decode(e)
			if err != nil {
				d.Err = err
			}
			out = append(out, d)
		}
	}
}

// Watch streams decoded changes of keys matching filter until ctx ends. The
// first values are the current ones, then a zero Entry marks "caught up",
// then live changes (deletes and expiries have Deleted set). A value that
// does not decode is reported with Err set.
func (s *Store[T]) Watch(ctx context.Context, filter string, opts ...jetstream.WatchOpt) (<-chan Entry[T], error) {
	return s.watch(ctx, filter, s.decode, opts...)
}

// WatchKeys is Watch without the values: keys, revisions and deletes (an
// Entry's Value is always nil). The server sends headers only
// (jetstream.MetaOnly), so a reader that needs to know which keys exist —
// the reaper, of node presence — neither receives nor decodes the bytes
// of every heartbeat.
func (s *Store[T]) WatchKeys(ctx context.Context, filter string) (<-chan Entry[T], error) {
	meta := func(e jetstream.KeyValueEntry) (Entry[T], error) {
		return Entry[T]{Key: e.Key(), Revision: e.Revision(), Created: e.Created(), Deleted: e.Operation() != jetstream.KeyValuePut}, nil
	}
	return s.watch(ctx, filter, meta, jetstream.MetaOnly())
}

func (s *Store[T]) watch(ctx context.Context, filter string, decode func(jetstream.KeyValueEntry) (Entry[T], error), opts ...jetstream.WatchOpt) (<-chan Entry[T], error) {
	w, err := s.startWatch(ctx, filter, opts...)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", s.kv.Bucket(), err)
	}
	out := make(chan Entry[T], 256)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				var d Entry[T]
				if e != nil {
					var err error
					if d, err = decode(e); err != nil {
						d.Err = err
					}
				}
				select {
				case out <- d:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// startWatch creates a watcher, asking again when its consumer's creation
// goes unanswered. The watcher lives until ctx ends.
func (s *Store[T]) startWatch(ctx context.Context, filter string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	for n := 0; ; n++ {
		wctx, dog := newWatchdog(ctx)
		w, err := s.kv.Watch(wctx, filter, opts...)
		dog.disarm()
		if err == nil && !dog.timedOut() {
			return w, nil
		}
		dog.stop()
		if err == nil {
			_ = w.Stop()
			err = fmt.Errorf("no answer within %s: %w", AttemptTimeout, context.DeadlineExceeded)
		}
		if !Unanswered(ctx, err) {
			return nil, err
		}
		if werr := retryPause(ctx, n); werr != nil {
			return nil, err
		}
	}
}

func (s *Store[T]) wrap(op, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errDirectConflict):
		return fmt.Errorf("%s %s/%s: %w: %w", op, s.kv.Bucket(), key, err, ErrConflict)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		// A lost CAS race is ErrKeyExists on a single server and
		// ErrKeyRevisionMismatch (JetStream error 10164) on a cluster.
		return fmt.Errorf("%s %s/%s: %w", op, s.kv.Bucket(), key, ErrConflict)
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fmt.Errorf("%s %s/%s: %w", op, s.kv.Bucket(), key, ErrNotFound)
	default:
		return fmt.Errorf("%s %s/%s: %w", op, s.kv.Bucket(), key, explain(err))
	}
}
