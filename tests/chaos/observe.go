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

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func startEnvAt(s *system) *natstest.Env {
	return natstest.StartAt(s.t, s.natsDir, s.listen, s.settings)
}

// watchers record every stored write of the nodeconfigs, rollouts and
// status buckets in stream order, from before the first apply to the end.
// After a NATS restart they resume from the revision after the last seen.
type watchers struct {
	sys    *system
	mu     sync.Mutex
	ops    map[string][]KVOp // bucket → ops
	status []*sluicev1.NodeStatus
	last   map[string]uint64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var watched = []string{contract.BucketNodeConfigs, contract.BucketRollouts, contract.BucketStatus}

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

func (w *watchers) record(bucket string, e jetstream.KeyValueEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e.Revision() <= w.last[bucket] {
		return
	}
	w.last[bucket] = e.Revision()
	op := KVOp{Key: e.Key(), Revision: e.Revision(), At: time.Now(), Delete: e.Operation() != jetstream.KeyValuePut}
	if !op.Delete && !contract.IsControlKey(e.Key()) {
		switch bucket {
		case contract.BucketNodeConfigs:
			d := &sluicev1.DesiredConfig{}
			if store.Unmarshal(e.Value(), d) == nil {
				op.Desired = d
			}
		case contract.BucketRollouts:
			if e.Key() != contract.KeyActive && e.Key() != contract.KeyLastApplied {
				r := &sluicev1.Rollout{}
				if store.Unmarshal(e.Value(), r) == nil {
					op.Rollout = r
				}
			}
		case contract.BucketStatus:
			st := &sluicev1.NodeStatus{}
			if store.Unmarshal(e.Value(), st) == nil {
				w.status = append(w.status, st)
			}
			return
		}
	}
	w.ops[bucket] = append(w.ops[bucket], op)
}

// readProto decodes key of kv into v; an error if absent or unreadable.
//
// It reads through a watcher, which the stream's leader serves: a Get is a
// direct get that any replica may answer, and on an R3 seed a server just
// restarted can answer with what it had before it caught up.
func readProto[T proto.Message](ctx context.Context, s *system, kv jetstream.KeyValue, key string, v T) (T, error) {
	var zero T
	data, err := s.leaderGet(ctx, kv, key)
	if err != nil {
		return zero, err
	}
	if err := store.Unmarshal(data, v); err != nil {
		return zero, fmt.Errorf("%s: %w", key, err)
	}
	return v, nil
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
		return nil, err
	}
	info, err := st.Info(rctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
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
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + kv.Bucket() + "." + key})
	rctx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	defer cancel()
	reply, err := s.Env().Conn.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET.KV_"+kv.Bucket(), req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message struct {
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", kv.Bucket(), key, err)
	}
	if e := resp.Error; e != nil {
		if e.Code == 10037 { // no message found
			return nil, jetstream.ErrKeyNotFound
		}
		return nil, fmt.Errorf("get %s/%s: %s (%d)", kv.Bucket(), key, e.Description, e.Code)
	}
	// A delete, a purge or a TTL's expiry marker: no value.
	if h := string(resp.Message.Hdrs); strings.Contains(h, "KV-Operation") || strings.Contains(h, "Nats-Marker-Reason") {
		return nil, jetstream.ErrKeyNotFound
	}
	return resp.Message.Data, nil
}

// quiescent reports what has not settled yet: no coordinator leading with
// its state loaded, or one with desired-config writes still pending, a
// rollout still running, a node whose agent has not reported on its desired
// config or is applying.
func (s *system) quiescent(ctx context.Context) []string {
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
		return []string{"list rollouts: " + err.Error()}
	}
	for _, k := range keys {
		if k == contract.KeyActive {
			if _, err := s.leaderGet(ctx, b.Rollouts, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
				busy = append(busy, "rollouts/active is set")
			}
			continue
		}
		if k == contract.KeyLastApplied || contract.IsControlKey(k) {
			continue
		}
		if r := s.rollout(ctx, k); r != nil && !ended(r) {
			busy = append(busy, fmt.Sprintf("rollout %s is %s", k, r.GetPhase()))
		}
	}
	_, laErr := s.leaderGet(ctx, b.Rollouts, contract.KeyLastApplied)
	inForce := laErr == nil
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
			busy = append(busy, name+" has no presence")
			continue
		}
		d, derr := readProto(ctx, s, b.NodeConfigs, contract.DesiredKey(name), &sluicev1.DesiredConfig{})
		if errors.Is(derr, jetstream.ErrKeyNotFound) {
			if inForce && !s.inForceKnownBad(ctx, n) {
				// A live node gets the config in force (e.g. after its keys
				// were reaped while it was away): not configured yet. Unless
				// that config is recorded invalid: then it keeps its own.
				busy = append(busy, name+" has no desired config yet")
			}
			continue
		}
		st, serr := readProto(ctx, s, b.Status, name, &sluicev1.NodeStatus{})
		switch {
		case derr != nil || serr != nil:
			busy = append(busy, fmt.Sprintf("%s: desired %v, status %v", name, derr, serr))
		case st.GetFingerprint() != d.GetFingerprint():
			busy = append(busy, fmt.Sprintf("%s reports %s, desired is %s", name, short(st.GetFingerprint()), short(d.GetFingerprint())))
		case st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING:
			busy = append(busy, name+" is provisioning")
		}
	}
	return busy
}

// inForceKnownBad reports whether the config in force for n (the
// last-applied revision rendered for its labels) is recorded invalid: the
// coordinator then gives it nothing rather than a config known to fail.
func (s *system) inForceKnownBad(ctx context.Context, n *nodeSim) bool {
	b := s.Env().Buckets
	ref, err := readProto(ctx, s, b.Rollouts, contract.KeyLastApplied, &sluicev1.RolloutRef{})
	if err != nil {
		return false
	}
	rev, err := readProto(ctx, s, b.Revisions, ref.GetRevision(), &sluicev1.Revision{})
	if err != nil {
		return false
	}
	fp := render.Fingerprint(render.NodeConfig(rev, NodeLabels(n.index)))
	f, err := readProto(ctx, s, b.Fingerprints, fp, &sluicev1.InvalidFingerprint{})
	return err == nil && f.GetForgiven() == nil
}

// settle waits until the system is quiescent for a few polls in a row, and
// returns what had not settled if it never was.
func (s *system) settle(ctx context.Context, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	calm := 0
	var busy []string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		busy = s.quiescent(qctx)
		cancel()
		if len(busy) == 0 {
			calm++
			if calm >= 4 {
				return nil
			}
		} else {
			calm = 0
		}
		time.Sleep(60 * time.Millisecond)
	}
	return busy
}

// observe gathers the Observation at rest.
func (s *system) observe(ctx context.Context, w *watchers, d *driver, natsRestarted bool, notQuiescent []string) (*Observation, error) {
	b := s.Env().Buckets
	o := &Observation{Fingerprints: map[string]*sluicev1.InvalidFingerprint{}, Targets: map[string]map[string]string{},
		EmptyFingerprint: render.Fingerprint(&sluicev1.NodeConfig{}), NotQuiescent: notQuiescent}
	keys, err := s.leaderKeys(ctx, b.Rollouts)
	if err != nil {
		return nil, fmt.Errorf("list rollouts: %w", err)
	}
	for _, k := range keys {
		switch {
		case k == contract.KeyActive:
			o.Active, _ = readProto(ctx, s, b.Rollouts, k, &sluicev1.RolloutRef{})
		case k == contract.KeyLastApplied:
			o.LastApplied, _ = readProto(ctx, s, b.Rollouts, k, &sluicev1.RolloutRef{})
		case contract.IsControlKey(k):
		default:
			if r, err := readProto(ctx, s, b.Rollouts, k, &sluicev1.Rollout{}); err == nil {
				o.Rollouts = append(o.Rollouts, r)
			}
		}
	}
	fkeys, err := s.leaderKeys(ctx, b.Fingerprints)
	if err != nil {
		return nil, fmt.Errorf("list fingerprints: %w", err)
	}
	for _, k := range fkeys {
		if contract.IsControlKey(k) {
			continue
		}
		if f, err := readProto(ctx, s, b.Fingerprints, k, &sluicev1.InvalidFingerprint{}); err == nil {
			o.Fingerprints[k] = f
		}
	}
	labels := map[string]map[string]string{}
	for _, name := range sortedKeys(s.nodes) {
		n := s.nodes[name]
		labels[name] = NodeLabels(n.index)
		no := NodeObs{Name: name, Live: s.running(name), OnDisk: s.onDisk(name), Applies: n.history()}
		no.Desired, _ = readProto(ctx, s, b.NodeConfigs, contract.DesiredKey(name), &sluicev1.DesiredConfig{})
		no.Backup, _ = readProto(ctx, s, b.NodeConfigs, contract.BackupKey(name), &sluicev1.DesiredConfig{})
		no.Status, _ = readProto(ctx, s, b.Status, name, &sluicev1.NodeStatus{})
		o.Nodes = append(o.Nodes, no)
	}
	for _, r := range o.Rollouts {
		rev, err := readProto(ctx, s, b.Revisions, r.GetRevision(), &sluicev1.Revision{})
		if err != nil {
			continue
		}
		t := map[string]string{}
		for node, l := range labels {
			t[node] = render.Fingerprint(render.NodeConfig(rev, l))
		}
		o.Targets[r.GetId()] = t
	}
	// On a cluster the stream may have no leader for a moment after a
	// server came back: try a few times.
	var evs []*sluicev1.Event
	for try := 0; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		evs, err = readEvents(rctx, s.Env().JS)
		cancel()
		if err == nil || try == 3 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	o.Events = evs
	w.mu.Lock()
	o.ConfigWrites = append([]KVOp(nil), w.ops[contract.BucketNodeConfigs]...)
	o.RolloutWrites = append([]KVOp(nil), w.ops[contract.BucketRollouts]...)
	o.StatusWrites = append([]*sluicev1.NodeStatus(nil), w.status...)
	w.mu.Unlock()
	o.Expect = d.expectations(natsRestarted)
	return o, nil
}

// readEvents reads the whole events stream in order.
func readEvents(ctx context.Context, js jetstream.JetStream) ([]*sluicev1.Event, error) {
	st, err := js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("events stream info: %w", err)
	}
	var out []*sluicev1.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // expired or deleted
		}
		if err != nil {
			return nil, fmt.Errorf("events stream message %d: %w", seq, err)
		}
		ev := &sluicev1.Event{}
		if store.Unmarshal(m.Data, ev) == nil {
			out = append(out, ev)
		}
	}
	return out, nil
}

// settleRegistered waits until every agent registered; it returns what is
// missing if they did not in time.
func (s *system) settleRegistered(ctx context.Context, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		for _, name := range sortedKeys(s.nodes) {
			if _, err := s.leaderGet(ctx, s.Env().Buckets.Nodes, name); err != nil {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("agents did not register within %s: %v", timeout, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
