package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func startEnvAt(s *system) *natstest.Env {
	if s.virtual {
		return natstest.StartInProcess(s.t, s.natsDir, s.settings, s.inProcess)
	}
	return natstest.StartAt(s.t, s.natsDir, s.listen, s.settings)
}

// watchers record every stored write of the nodeconfigs, rollouts, status
// and intents buckets in stream order, from before the first apply to the
// end. After a NATS restart they resume from the revision after the last
// seen. Values are decoded as sluice reads them (store.Decode): a value that
// is not well-formed for its key (garbage-value) is recorded as an op with
// no value, and a status that is not is left out.
type watchers struct {
	sys    *system
	mu     sync.Mutex
	ops    map[string][]KVOp // bucket → ops
	status []*sluicev1.NodeStatus
	last   map[string]uint64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var watched = []string{contract.BucketNodeConfigs, contract.BucketRollouts, contract.BucketStatus, contract.BucketIntents}

func newWatchers(s *system) *watchers {
	w := &watchers{sys: s, ops: map[string][]KVOp{}, last: map[string]uint64{}}
	w.resume()
	return w
}

// resume (re)starts the watchers on the current server.
func (w *watchers) resume() {
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.mu.Unlock()
	w.wg.Wait()
	js := w.sys.Env().JS
	for _, b := range watched {
		w.wg.Go(func() { w.watch(ctx, js, b) })
	}
}

func (w *watchers) stop() {
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (w *watchers) watch(ctx context.Context, js jetstream.JetStream, bucket string) {
	for ctx.Err() == nil {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		from := w.last[bucket]
		w.mu.Unlock()
		opts := []jetstream.WatchOpt{jetstream.IncludeHistory()}
		if from > 0 {
			opts = []jetstream.WatchOpt{jetstream.ResumeFromRevision(from + 1)}
		}
		kw, err := kv.WatchAll(ctx, opts...)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		w.consume(ctx, kw, bucket)
		_ = kw.Stop()
	}
}

func (w *watchers) consume(ctx context.Context, kw jetstream.KeyWatcher, bucket string) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			w.record(bucket, e)
		}
	}
}

// maxEpoch is the highest leader epoch of a desired config or rollout
// record the watchers saw written so far.
func (w *watchers) maxEpoch() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var e uint64
	for _, op := range w.ops[contract.BucketNodeConfigs] {
		e = max(e, op.Desired.GetLeaderEpoch())
	}
	for _, op := range w.ops[contract.BucketRollouts] {
		e = max(e, op.Rollout.GetLeaderEpoch())
	}
	return e
}

// snapshot is every op of bucket recorded so far.
func (w *watchers) snapshot(bucket string) []KVOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ops[bucket])
}

// storedAt is when the server stored e (its stream message's timestamp, on
// this machine's clock): a watcher that lags, as one does while it catches
// up after a server restart under load, would otherwise date a write
// seconds late (chaos seed 136: a rollout's terminal record seen 1.9 s
// after it was written made a reap after the rollout ended look like one
// during it, I5; an intent's mark seen after the harness put its files
// back looked like an unconfirmed mark, I7).
func storedAt(e jetstream.KeyValueEntry) time.Time {
	if t := e.Created(); !t.IsZero() && !t.After(time.Now()) {
		return t
	}
	return time.Now()
}

func (w *watchers) record(bucket string, e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.Revision() <= w.last[bucket] {
		return
	}
	w.last[bucket] = e.Revision()
	op := KVOp{Key: e.Key(), Revision: e.Revision(), At: storedAt(e), Delete: e.Operation() != jetstream.KeyValuePut}
	if !op.Delete && !contract.IsControlKey(e.Key()) {
		switch bucket {
		case contract.BucketNodeConfigs:
			d := &sluicev1.DesiredConfig{}
			if store.Decode(bucket, e.Key(), e.Value(), d) == nil {
				op.Desired = d
			}
		case contract.BucketRollouts:
			if e.Key() != contract.KeyActive && e.Key() != contract.KeyLastApplied {
				r := &sluicev1.Rollout{}
				if store.Decode(bucket, e.Key(), e.Value(), r) == nil {
					op.Rollout = r
				}
			}
		case contract.BucketStatus:
			st := &sluicev1.NodeStatus{}
			if store.Decode(bucket, e.Key(), e.Value(), st) == nil {
				w.status = append(w.status, st)
			}
			return
		case contract.BucketIntents:
			in := &sluicev1.StoredIntent{}
			if store.Decode(bucket, e.Key(), e.Value(), in) == nil {
				op.Intent = in
			}
		}
	}
	w.ops[bucket] = append(w.ops[bucket], op)
}

// readProto decodes key of kv, read from the stream's leader (leaderGet),
// into v as sluice reads it (store.Decode): jetstream.ErrKeyNotFound if
// absent, errUndecodable if it does not decode or is not well-formed for
// its key (quarantined), or the read's error. One attempt: callers poll,
// or wrap it in retry.
func readProto[T proto.Message](ctx context.Context, s *system, kv jetstream.KeyValue, key string, v T) (T, error) {
	var zero T
	m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
	if err == nil && m.deleted {
		err = jetstream.ErrKeyNotFound
	}
	if err != nil {
		return zero, err
	}
	if err := store.Decode(kv.Bucket(), key, m.data, v); err != nil {
		return zero, fmt.Errorf("%s/%s revision %d: %w: %w", kv.Bucket(), key, m.seq, errUndecodable, err)
	}
	return v, nil
}

// readRest is readProto for judging the system at rest: a key that still
// holds a garbage value the harness wrote (garbage-value) reads as the
// value its owner stored there before — nobody rewrote it, and that is
// what its owner still goes by — or as absent if it held none.
func readRest[T proto.Message](ctx context.Context, s *system, kv jetstream.KeyValue, key string, v T) (T, error) {
	var zero T
	m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
	if err == nil && m.deleted {
		err = jetstream.ErrKeyNotFound
	}
	if err != nil {
		return zero, err
	}
	if err := store.Decode(kv.Bucket(), key, m.data, v); err != nil {
		sp := s.spoiled.at(kv.Bucket(), key, m.seq)
		if sp == nil {
			return zero, fmt.Errorf("%s/%s revision %d: %w: %w", kv.Bucket(), key, m.seq, errUndecodable, err)
		}
		if b, ok := sp.Before.(T); ok {
			return b, nil
		}
		return zero, jetstream.ErrKeyNotFound
	}
	return v, nil
}

// unread reports whether err is a failed read: not an answer (a value,
// none, or one that does not decode).
func unread(err error) bool {
	return err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, errUndecodable)
}

// leaderKeys lists the keys kv has held, from the stream's leader: a
// stream info with a subject filter, which the leader answers. KV's
// ListKeys runs an ordered consumer, which may be placed on a replica still
// catching up after a server restart and then misses recent keys (seed 27:
// fingerprints recorded while a server was down were not listed). Deleted
// keys are listed too: leaderGet answers jetstream.ErrKeyNotFound for them.
func (s *system) leaderKeys(ctx context.Context, kv jetstream.KeyValue) ([]string, error) {
	prefix := "$KV." + kv.Bucket() + "."
	rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	st, err := s.Env().JS.Stream(rctx, "KV_"+kv.Bucket())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kv.Bucket(), err)
	}
	info, err := st.Info(rctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", kv.Bucket(), err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		keys = append(keys, strings.TrimPrefix(subj, prefix))
	}
	slices.Sort(keys)
	return keys, nil
}

// leaderGet reads key's current value from the stream's leader (a message
// get, not a direct get nor a watcher: either may be served by a replica
// that has not caught up after a server restart); jetstream.ErrKeyNotFound
// when it has none or was deleted.
func (s *system) leaderGet(ctx context.Context, kv jetstream.KeyValue, key string) ([]byte, error) {
	m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
	if err == nil && m.deleted {
		err = jetstream.ErrKeyNotFound
	}
	return m.data, err
}

// kvSubject is the stream subject of key of kv.
func kvSubject(kv jetstream.KeyValue, key string) string { return "$KV." + kv.Bucket() + "." + key }

// streamMsg is one message of a bucket's stream.
type streamMsg struct {
	seq     uint64 // its sequence: the key's KV revision
	data    []byte
	deleted bool // a delete, a purge or a TTL's expiry marker: no value
}

// leaderMsg is a message get req (e.g. {"last_by_subj": subject}) of kv's
// stream, answered by its leader; jetstream.ErrKeyNotFound when no message
// matches.
func (s *system) leaderMsg(ctx context.Context, kv jetstream.KeyValue, req map[string]any) (streamMsg, error) {
	body, _ := json.Marshal(req)
	rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	reply, err := s.Env().Conn.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET.KV_"+kv.Bucket(), body)
	if err != nil {
		return streamMsg{}, fmt.Errorf("get %s %s: %w", kv.Bucket(), body, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return streamMsg{}, fmt.Errorf("get %s %s: %w", kv.Bucket(), body, err)
	}
	if e := resp.Error; e != nil {
		if e.Code == 10037 { // no message found
			return streamMsg{}, jetstream.ErrKeyNotFound
		}
		return streamMsg{}, fmt.Errorf("get %s %s: %s (%d)", kv.Bucket(), body, e.Description, e.Code)
	}
	h := string(resp.Message.Hdrs)
	return streamMsg{seq: resp.Message.Seq, data: resp.Message.Data,
		deleted: strings.Contains(h, "KV-Operation") || strings.Contains(h, "Nats-Marker-Reason")}, nil
}

// quiescent reports what has not settled yet: no coordinator leading with
// its state loaded, or one with desired-config writes still pending, a
// rollout still running, a node whose agent has not reported on its desired
// config or is applying. Its error is a read that failed (one attempt:
// await polls), and then it cannot tell. A key still holding a garbage
// value the harness wrote is judged by its owner's value before (readRest).
func (s *system) quiescent(ctx context.Context) ([]string, error) {
	var busy []string
	leaders, pending := 0, 0
	s.mu.Lock()
	for _, c := range s.coords {
		if ok, n := c.Leading(); ok {
			leaders++
			pending += n
		}
	}
	s.mu.Unlock()
	if leaders == 0 {
		busy = append(busy, "no coordinator leads")
	}
	if pending > 0 {
		busy = append(busy, fmt.Sprintf("%d desired-config writes pending", pending))
	}
	b := s.Env().Buckets
	keys, err := s.leaderKeys(ctx, b.Rollouts)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		switch {
		case k == contract.KeyLastApplied || contract.IsControlKey(k):
			continue
		case k == contract.KeyActive:
			m, err := s.leaderMsg(ctx, b.Rollouts, map[string]any{"last_by_subj": kvSubject(b.Rollouts, k)})
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound) || err == nil && m.deleted:
			case err != nil:
				return nil, err
			case !wellFormed(b.Rollouts.Bucket(), k, m.data) && s.spoiled.at(b.Rollouts.Bucket(), k, m.seq) != nil:
				// Garbage the harness wrote over the pointer: what matters is
				// whether the rollout it named before still runs (below).
			default:
				busy = append(busy, "rollouts/active is set")
			}
			continue
		}
		r, err := readRest(ctx, s, b.Rollouts, k, &sluicev1.Rollout{})
		if unread(err) {
			return nil, err
		}
		if err == nil && !ended(r) {
			busy = append(busy, fmt.Sprintf("rollout %s is %s", k, r.GetPhase()))
		}
	}
	_, laErr := readRest(ctx, s, b.Rollouts, contract.KeyLastApplied, &sluicev1.RolloutRef{})
	if unread(laErr) {
		return nil, laErr
	}
	inForce := !errors.Is(laErr, jetstream.ErrKeyNotFound)
	for _, name := range sortedKeys(s.nodes) {
		n := s.nodes[name]
		if !s.running(name) {
			busy = append(busy, name+" agent is stopped")
			continue
		}
		if t := n.applying.Load(); t != 0 {
			busy = append(busy, fmt.Sprintf("%s is applying table %d", name, t))
			continue
		}
		if _, err := s.leaderGet(ctx, b.Nodes, name); err != nil {
			if unread(err) {
				return nil, err
			}
			busy = append(busy, name+" has no presence")
			continue
		}
		d, derr := readRest(ctx, s, b.NodeConfigs, contract.DesiredKey(name), &sluicev1.DesiredConfig{})
		if unread(derr) {
			return nil, derr
		}
		if before, err := s.staleAtRest(ctx, contract.DesiredKey(name)); err != nil {
			return nil, err
		} else if before != nil {
			d = before // the harness's stale write (stale-desired): judged by the coordinator's before it
		}
		if errors.Is(derr, jetstream.ErrKeyNotFound) {
			if !inForce {
				continue
			}
			bad, err := s.inForceKnownBad(ctx, n)
			if err != nil {
				return nil, err
			}
			stuck, err := s.inForceUnrenderable(ctx) // a documented limit (inforce.go)
			if err != nil {
				return nil, err
			}
			if !bad && !stuck {
				// A live node gets the config in force (e.g. after its keys
				// were reaped while it was away): not configured yet. Unless
				// that config is recorded invalid: then it keeps its own.
				busy = append(busy, name+" has no desired config yet")
			}
			continue
		}
		st, serr := readRest(ctx, s, b.Status, name, &sluicev1.NodeStatus{})
		if unread(serr) {
			return nil, serr
		}
		switch {
		case derr != nil || serr != nil:
			busy = append(busy, fmt.Sprintf("%s: desired %v, status %v", name, derr, serr))
		case st.GetFingerprint() != d.GetFingerprint():
			busy = append(busy, fmt.Sprintf("%s reports %s, desired is %s", name, short(st.GetFingerprint()), short(d.GetFingerprint())))
		case st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING:
			busy = append(busy, name+" is provisioning")
		}
	}
	return busy, nil
}

// inForceKnownBad reports whether the config in force for n (the
// last-applied revision rendered for its labels) is recorded invalid: the
// coordinator then gives it nothing rather than a config known to fail.
// Its error is a read that failed.
func (s *system) inForceKnownBad(ctx context.Context, n *nodeSim) (bool, error) {
	b := s.Env().Buckets
	ref, err := readRest(ctx, s, b.Rollouts, contract.KeyLastApplied, &sluicev1.RolloutRef{})
	if err != nil {
		return false, failed(err)
	}
	rev, err := readRest(ctx, s, b.Revisions, ref.GetRevision(), &sluicev1.Revision{})
	if err != nil {
		return false, failed(err)
	}
	fp := render.Fingerprint(render.NodeConfig(rev, s.sc.Labels(n.index)))
	f, err := readRest(ctx, s, b.Fingerprints, fp, &sluicev1.InvalidFingerprint{})
	if err != nil {
		return false, failed(err)
	}
	return f.GetForgiven() == nil, nil
}

// staleAtRest is the desired config the coordinator stored at key before
// the harness's stale write (stale-desired), if the key still holds that
// write; nil otherwise.
func (s *system) staleAtRest(ctx context.Context, key string) (*sluicev1.DesiredConfig, error) {
	var before *sluicev1.DesiredConfig
	for _, sp := range s.spoiled.all() {
		if !sp.Stale || sp.Key != key {
			continue
		}
		kv := s.Env().Buckets.NodeConfigs
		m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
		if unread(err) {
			return nil, err
		}
		if err == nil && !m.deleted && m.seq == sp.Revision {
			before, _ = sp.Before.(*sluicev1.DesiredConfig)
		}
	}
	return before, nil
}

// failed is err if it is a failed read, nil if an answer (unread).
func failed(err error) error {
	if unread(err) {
		return err
	}
	return nil
}

// settle waits until the system is quiescent for four polls in a row, and
// returns what had not settled if it never was within timeout; its error
// is the harness's failure to read (await).
func (s *system) settle(ctx context.Context, timeout time.Duration) ([]string, error) {
	return await(ctx, timeout, 4, s.quiescent)
}

// await polls poll until it reports nothing busy calm times in a row, and
// returns what was busy if that did not happen within timeout. A poll whose
// reads failed (servers the harness restarted are still coming back) tells
// nothing either way: await goes on past timeout until a poll reads, for
// up to readPatience of failed polls in a row, and then fails with the last
// poll's error. It gives up when ctx ends: give ctx timeout + readPatience
// and some.
func await(ctx context.Context, timeout time.Duration, calm int, poll func(context.Context) ([]string, error)) ([]string, error) {
	start := time.Now()
	quiet := 0
	var busy []string
	var failing time.Time // when the polls began failing; zero while they read
	var polls int         // failed polls since failing
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
		b, err := poll(pctx)
		cancel()
		switch {
		case err != nil:
			if failing.IsZero() {
				failing, polls = time.Now(), 0
			}
			quiet, last = 0, err
			polls++
		case len(b) == 0:
			failing = time.Time{}
			if quiet++; quiet >= calm {
				return nil, nil
			}
		default:
			failing, quiet, busy = time.Time{}, 0, b
			if time.Since(start) > timeout {
				return busy, nil
			}
		}
		if !failing.IsZero() && (time.Since(failing) >= readPatience || ctx.Err() != nil) {
			return nil, fmt.Errorf("%w (%s)", last, tries(polls, "failed poll", "failed polls in a row", time.Since(failing)))
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("still polling %s after it began (%d calm in a row, %d wanted): %w",
				time.Since(start).Round(time.Millisecond), quiet, calm, ctx.Err())
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// reader makes observe's reads, each retried (retry). The first read that
// still fails is kept in err and makes every later one a no-op: observe
// checks err once, and a read that failed is never taken for an absent
// key, which the checker would judge.
type reader struct {
	s   *system
	err error
}

// keys lists kv's keys from its stream's leader (leaderKeys).
func (r *reader) keys(ctx context.Context, kv jetstream.KeyValue) []string {
	if r.err != nil {
		return nil
	}
	var keys []string
	r.err = retry(ctx, func(ctx context.Context) (err error) {
		keys, err = r.s.leaderKeys(ctx, kv)
		return err
	})
	return keys
}

// get reads key of kv into v: nil if it is absent or does not decode, or
// if a read failed (r.err).
func get[T proto.Message](ctx context.Context, r *reader, kv jetstream.KeyValue, key string, v T) T {
	var zero T
	if r.err != nil {
		return zero
	}
	err := retry(ctx, func(ctx context.Context) error {
		_, err := readProto(ctx, r.s, kv, key, v)
		return err
	})
	if err != nil {
		if unread(err) {
			r.err = err
		}
		return zero
	}
	return v
}

// atRest reports whether key of kv still holds the value stored at rev
// (a spoil nobody rewrote).
func (r *reader) atRest(ctx context.Context, kv jetstream.KeyValue, key string, rev uint64) bool {
	if r.err != nil {
		return false
	}
	var m streamMsg
	err := retry(ctx, func(ctx context.Context) (err error) {
		m, err = r.s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			m, err = streamMsg{deleted: true}, nil
		}
		return err
	})
	if err != nil {
		r.err = err
		return false
	}
	return !m.deleted && m.seq == rev
}

// observe gathers the Observation at rest. Its error is a read that failed
// for readPatience: the harness's failure, not the system's.
func (s *system) observe(ctx context.Context, w *watchers, d *driver, natsRestarted bool, notQuiescent []string) (*Observation, error) {
	b := s.Env().Buckets
	o := &Observation{Fingerprints: map[string]*sluicev1.InvalidFingerprint{}, Targets: map[string]map[string]string{}, RevisionIntents: map[string][]string{},
		EmptyFingerprint: render.Fingerprint(&sluicev1.NodeConfig{}), NotQuiescent: notQuiescent}
	r := &reader{s: s}
	for _, k := range r.keys(ctx, b.Rollouts) {
		switch {
		case k == contract.KeyActive:
			o.Active = get(ctx, r, b.Rollouts, k, &sluicev1.RolloutRef{})
		case k == contract.KeyLastApplied:
			o.LastApplied = get(ctx, r, b.Rollouts, k, &sluicev1.RolloutRef{})
		case contract.IsControlKey(k):
		default:
			if rec := get(ctx, r, b.Rollouts, k, &sluicev1.Rollout{}); rec != nil {
				o.Rollouts = append(o.Rollouts, rec)
			}
		}
	}
	for _, k := range r.keys(ctx, b.Fingerprints) {
		if contract.IsControlKey(k) {
			continue
		}
		if f := get(ctx, r, b.Fingerprints, k, &sluicev1.InvalidFingerprint{}); f != nil {
			o.Fingerprints[k] = f
		}
	}
	labels := map[string]map[string]string{}
	for _, name := range sortedKeys(s.nodes) {
		n := s.nodes[name]
		labels[name] = s.sc.Labels(n.index)
		no := NodeObs{Name: name, Live: s.running(name), OnDisk: s.onDisk(name), Applies: n.history(), Features: s.sc.features(name)}
		no.Desired = get(ctx, r, b.NodeConfigs, contract.DesiredKey(name), &sluicev1.DesiredConfig{})
		no.Backup = get(ctx, r, b.NodeConfigs, contract.BackupKey(name), &sluicev1.DesiredConfig{})
		no.Status = get(ctx, r, b.Status, name, &sluicev1.NodeStatus{})
		o.Nodes = append(o.Nodes, no)
	}
	// The garbage the harness wrote, and whether each is still there: the
	// checker judges such a key by what its owner stored there before.
	o.Spoiled = s.spoiled.all()
	for i := range o.Spoiled {
		sp := &o.Spoiled[i]
		sp.AtRest = r.atRest(ctx, bucketKV(b, sp.Bucket), sp.Key, sp.Revision)
	}
	// Targets of every rollout, those whose record is garbage at rest too
	// (by the record before), from their revisions (the one before, if
	// garbage at rest).
	rolls := slices.Clone(o.Rollouts)
	for _, sp := range o.Spoiled {
		if rec, ok := sp.Before.(*sluicev1.Rollout); ok && sp.AtRest {
			rolls = append(rolls, rec)
		}
	}
	for _, ro := range rolls {
		rev := get(ctx, r, b.Revisions, ro.GetRevision(), &sluicev1.Revision{})
		for _, sp := range o.Spoiled {
			if before, ok := sp.Before.(*sluicev1.Revision); ok && rev == nil && sp.AtRest && sp.Bucket == contract.BucketRevisions && sp.Key == ro.GetRevision() {
				rev = before
			}
		}
		if rev == nil {
			// Absent (a revision holding garbage has its spoil recorded):
			// deleted while a rollout record names it (I5).
			if r.err == nil && ro.GetRevision() != "" && !slices.ContainsFunc(o.Spoiled, func(sp Spoil) bool {
				return sp.Bucket == contract.BucketRevisions && sp.Key == ro.GetRevision()
			}) {
				o.Unstored = append(o.Unstored, RevisionRef{Rollout: ro.GetId(), Revision: ro.GetRevision()})
			}
			continue
		}
		for _, in := range rev.GetIntents() {
			o.RevisionIntents[ro.GetId()] = append(o.RevisionIntents[ro.GetId()], intent.Key(in))
		}
		t := map[string]string{}
		for node, l := range labels {
			t[node] = render.Fingerprint(render.NodeConfig(rev, l))
		}
		o.Targets[ro.GetId()] = t
	}
	if r.err != nil {
		return nil, r.err
	}
	// On a cluster the stream may have no leader for a while after a
	// server came back: retry.
	err := retry(ctx, func(ctx context.Context) (err error) {
		o.Events, o.Misread, err = readEvents(ctx, s.Env().JS)
		return err
	})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	o.ConfigWrites = append([]KVOp(nil), w.ops[contract.BucketNodeConfigs]...)
	o.RolloutWrites = append([]KVOp(nil), w.ops[contract.BucketRollouts]...)
	o.StatusWrites = append([]*sluicev1.NodeStatus(nil), w.status...)
	o.IntentWrites = append([]KVOp(nil), w.ops[contract.BucketIntents]...)
	w.mu.Unlock()
	if s.sc.Registry != nil {
		o.Registry = s.reg.observed(s.sc.Registry.Intents)
	}
	o.Expect = d.expectations(natsRestarted)
	o.Joiners = d.joinedSoFar()
	s.observeExtras(o)
	o.Declared, o.DeclaredFrom = d.declared(), d.changes[0].first().gen
	return o, nil
}

// readEvents reads the whole events stream in order, as its readers do
// (events.Read): the events, and the messages they would show as
// unreadable.
func readEvents(ctx context.Context, js jetstream.JetStream) (evs []*sluicev1.Event, misread []string, err error) {
	st, err := js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return nil, nil, fmt.Errorf("events stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("events stream info: %w", err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // expired or deleted
		}
		if err != nil {
			return nil, nil, fmt.Errorf("events stream message %d: %w", seq, err)
		}
		ev, err := events.Read(m.Subject, m.Data)
		if err != nil {
			misread = append(misread, fmt.Sprintf("#%d on %s: %v", seq, m.Subject, err))
			continue
		}
		evs = append(evs, ev)
	}
	return evs, misread, nil
}

// unregistered lists the agents that have no presence yet; its error is a
// read that failed.
func (s *system) unregistered(ctx context.Context) ([]string, error) {
	var missing []string
	for _, name := range sortedKeys(s.nodes) {
		_, err := s.leaderGet(ctx, s.Env().Buckets.Nodes, name)
		if unread(err) {
			return nil, err
		}
		if err != nil {
			missing = append(missing, name)
		}
	}
	return missing, nil
}
