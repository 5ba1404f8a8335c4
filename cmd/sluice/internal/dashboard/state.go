package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Kinds of change, as the stream's update names them.
const (
	kindNode        = "node"
	kindRollout     = "rollout"
	kindActive      = "active"
	kindApplied     = "applied"
	kindFingerprint = "fingerprint"
	kindPause       = "pause"
	kindInstance    = "instance"
	kindLeader      = "leader"
	kindEvent       = "event"
	kindFreeze      = "freeze"
	kindRegistry    = "registry"
	kindStoreLoss   = "storeloss"
	kindStorage     = "storage"
	kindHead        = "head"
)

// ringSize is how many changes the state remembers for viewers that
// reconnect: one that missed more gets a fresh snapshot.
const ringSize = 1 << 16

// recentEvents is how many events of the stream a snapshot carries.
const recentEvents = 200

// change is one entry of the ring: a key of a kind changed (its current
// value is what a viewer is sent, so changes to one key coalesce), or an
// event was stored (events are sent each, in order).
type change struct {
	seq   uint64
	kind  string
	key   string
	event json.RawMessage // kindEvent only
}

// state is everything the dashboard shows, followed from the buckets and
// the events stream once and shared by every viewer.
type state struct {
	mu           sync.Mutex
	seq          uint64 // of the last change
	ring         []change
	presences    map[string]*sluicev1.NodePresence
	statuses     map[string]*sluicev1.NodeStatus
	rollouts     map[string]*sluicev1.Rollout
	active       string
	fps          map[string]*sluicev1.InvalidFingerprint
	pause        *sluicev1.PauseRequest
	instances    map[string]*sluicev1.Instance
	leader       *sluicev1.LeaderLease
	leaseTTL     time.Duration                       // the leases bucket's TTL: the leader lease
	leaseEnd     *leaseEnd                           // how the last lease ended, while none is held
	lastTerm     *sluicev1.LeaderLease               // the term before the current one, when this dashboard saw it
	leaseEndTerm *sluicev1.LeaderLease               // the term whose lease ended, while none is held
	freezes      map[string]*sluicev1.Freeze         // by control key
	registries   map[string]*sluicev1.RegistryStatus // by name
	// head is sluice-revisions/head, the revision to roll out (nil: none
	// stored, or it does not decode); headBad says why it does not decode.
	// It is read, not inferred from the rollouts: the head moves before any
	// coordinator starts its rollout, and while none leads.
	head        *sluicev1.Head
	headBad     string
	groupBy     []string          // the labels the compact fleet carries
	events      []json.RawMessage // the last recentEvents, oldest first
	unreadable  map[string]view.Unreadable
	ready       map[string]bool // buckets whose initial values are all read
	watchErrors map[string]string
	// storeLoss says the store is lost (pkg/storeloss: "the store is empty
	// but N nodes run configs of revision X …"), "" when it is not.
	storeLoss string
	// storage says JetStream refuses writes for want of space
	// (pkg/store.StorageError), "" when it does not.
	storage string

	// The evidence of a lost store, kept as the watches apply values so
	// that checking it costs no read while nothing changed (checkStore):
	// how many live nodes run configs of each revision, whether the
	// rollouts bucket has last-applied, whether an operator confirmed.
	inForce     map[string]int
	lastApplied bool
	confirmed   bool
	revisions   jetstream.KeyValue // bound on first need; checkStore's goroutine only
	// trouble is the storage error of the writes seen (store.StorageTrouble).
	trouble func() (*store.StorageError, time.Time)

	// place is each node's category in the rollout shown (place.go).
	place placement
	// departed holds the labels of each node whose presence this dashboard
	// saw go while its status stays (it left, or was revoked): the map
	// keeps it in its rack, shown as left, rather than under "(no zone)".
	departed map[string]map[string]string
	// The revision in force (inforce.go): last-applied's revision and
	// rollout, the revision followApplied last read for it, and that
	// revision rendered (nil: none known).
	appliedID, appliedRollout, appliedRead string
	applied                                *view.InForce
	appliedWake                            chan struct{}
}

// leaseEnd is the coordinator lease's delete marker: released by its
// holder, or expired by the server one lease after its last renewal.
type leaseEnd struct {
	at      time.Time
	expired bool
}

func newState() *state {
	return &state{
		ring:        make([]change, ringSize),
		presences:   map[string]*sluicev1.NodePresence{},
		statuses:    map[string]*sluicev1.NodeStatus{},
		departed:    map[string]map[string]string{},
		appliedWake: make(chan struct{}, 1),
		rollouts:    map[string]*sluicev1.Rollout{},
		fps:         map[string]*sluicev1.InvalidFingerprint{},
		instances:   map[string]*sluicev1.Instance{},
		freezes:     map[string]*sluicev1.Freeze{},
		registries:  map[string]*sluicev1.RegistryStatus{},
		unreadable:  map[string]view.Unreadable{},
		ready:       map[string]bool{},
		watchErrors: map[string]string{},
		inForce:     map[string]int{},
		trouble:     store.StorageTrouble,
		place:       newPlacement(),
	}
}

// note records a change; the caller holds mu.
func (s *state) note(kind, key string, event json.RawMessage) {
	s.seq++
	s.ring[s.seq%ringSize] = change{seq: s.seq, kind: kind, key: key, event: event}
}

// since returns the changes after seq, or ok false when the ring no longer
// holds them all (the viewer then needs a snapshot). The caller holds mu.
func (s *state) since(seq uint64) (changes []change, ok bool) {
	if seq > s.seq {
		return nil, false // from another run of the dashboard
	}
	if s.seq-seq >= ringSize {
		return nil, false
	}
	for q := seq + 1; q <= s.seq; q++ {
		changes = append(changes, s.ring[q%ringSize])
	}
	return changes, true
}

// watched is one bucket the state follows (key: only that key of it; ""
// every key): apply decodes and stores a value (nil data: the key was
// deleted) and says whether it changed anything a viewer sees.
type watched struct {
	bucket string
	key    string
	opts   []jetstream.WatchOpt
	apply  func(key string, data []byte) (kind string, changed bool, err error)
}

func (s *state) watchedBuckets() []watched {
	return []watched{
		{contract.BucketNodes, "", nil, func(key string, data []byte) (string, bool, error) {
			ack := s.presences[key].GetPause()
			was := s.presences[key].GetInForceRevision()
			if old := s.presences[key]; old != nil && data == nil && s.statuses[key] != nil {
				s.departed[key] = old.GetLabels()
			} else if data != nil {
				delete(s.departed, key)
			}
			kind, changed, err := applyTo(kindNode, s.presences, key, data, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} },
				func(p *sluicev1.NodePresence) { p.HeartbeatAt = nil })
			if now := s.presences[key].GetInForceRevision(); now != was {
				s.inForce[was]--
				if s.inForce[was] <= 0 {
					delete(s.inForce, was)
				}
				s.inForce[now]++
			}
			if err == nil && !proto.Equal(ack, s.presences[key].GetPause()) {
				// An agent's presence is also its pause acknowledgement.
				s.note(kindPause, "", nil)
			}
			return kind, changed, err
		}},
		// The desired keys' metadata only (place.go: a node being written).
		{contract.BucketNodeConfigs, "", []jetstream.WatchOpt{jetstream.MetaOnly()}, nil},
		{contract.BucketStatus, "", nil, func(key string, data []byte) (string, bool, error) {
			if data == nil {
				delete(s.departed, key) // gone for good (the reaper's)
			}
			return applyTo(kindNode, s.statuses, key, data, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }, nil)
		}},
		{contract.BucketRollouts, "", nil, func(key string, data []byte) (string, bool, error) {
			switch key {
			case contract.KeyLastApplied:
				s.lastApplied = data != nil // a value, readable or not: the store has a history (as storeloss.Read)
				was := s.appliedRollout
				err := s.noteApplied(data)
				return kindApplied, was != s.appliedRollout, err
			case contract.KeyActive:
				ref := &sluicev1.RolloutRef{}
				if data != nil {
					if err := store.Unmarshal(data, ref); err != nil {
						return kindActive, false, err
					}
				}
				changed := ref.GetRollout() != s.active
				s.active = ref.GetRollout()
				return kindActive, changed, nil
			}
			return applyTo(kindRollout, s.rollouts, key, data, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }, nil)
		}},
		{contract.BucketFingerprints, "", nil, func(key string, data []byte) (string, bool, error) {
			return applyTo(kindFingerprint, s.fps, key, data, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }, nil)
		}},
		{contract.BucketControl, "", nil, func(key string, data []byte) (string, bool, error) {
			if strings.HasPrefix(key, contract.KeyFreezePrefix+".") {
				return applyTo(kindFreeze, s.freezes, key, data, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }, nil)
			}
			if key == contract.KeyStoreConfirm {
				// An unreadable confirmation confirms nothing (as storeloss.Read).
				s.confirmed = data != nil && store.Unmarshal(data, &sluicev1.StoreConfirm{}) == nil
				return "", false, nil
			}
			if key != contract.KeyPause {
				return "", false, nil
			}
			req := &sluicev1.PauseRequest{}
			if data != nil {
				if err := store.Unmarshal(data, req); err != nil {
					return kindPause, false, err
				}
			}
			changed := !proto.Equal(req, s.pause)
			s.pause = req
			return kindPause, changed, nil
		}},
		{contract.BucketInstances, "", nil, func(key string, data []byte) (string, bool, error) {
			return applyTo(kindInstance, s.instances, key, data, func() *sluicev1.Instance { return &sluicev1.Instance{} },
				func(in *sluicev1.Instance) { in.HeartbeatAt = nil })
		}},
		{contract.BucketLeases, "", nil, func(key string, data []byte) (string, bool, error) {
			if key != contract.LeaseCoordinator {
				return "", false, nil
			}
			var l *sluicev1.LeaderLease
			if data != nil {
				l = &sluicev1.LeaderLease{}
				if err := store.Unmarshal(data, l); err != nil {
					return kindLeader, false, err
				}
			}
			// A renewal alone changes nothing a viewer sees.
			changed := (l == nil) != (s.leader == nil) || l.GetHolder() != s.leader.GetHolder() ||
				l.GetEpoch() != s.leader.GetEpoch() || !proto.Equal(l.GetAcquiredAt(), s.leader.GetAcquiredAt())
			if l != nil && s.leader != nil && !sameTerm(l, s.leader) {
				s.lastTerm = s.leader // a takeover this dashboard saw
			}
			if l != nil {
				if s.leader == nil && s.lastTerm == nil && s.leaseEndTerm != nil && !sameTerm(s.leaseEndTerm, l) {
					s.lastTerm = s.leaseEndTerm
				}
				s.leader = l
			} else if s.leader != nil {
				s.leaseEndTerm = s.leader
				s.leader = nil
			}
			return kindLeader, changed, nil
		}},
		{contract.BucketRegistries, "", nil, func(key string, data []byte) (string, bool, error) {
			return applyTo(kindRegistry, s.registries, key, data, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }, nil)
		}},
		// Only the head of sluice-revisions: the revisions themselves are
		// read one at a time, when a rollout or last-applied names one.
		{contract.BucketRevisions, contract.KeyHead, nil, func(_ string, data []byte) (string, bool, error) {
			was, wasBad := s.head, s.headBad
			s.head, s.headBad = nil, ""
			var err error
			if data != nil {
				h := &sluicev1.Head{}
				if err = store.Unmarshal(data, h); err != nil {
					s.headBad = err.Error()
				} else {
					s.head = h
				}
			}
			return kindHead, wasBad != s.headBad || !proto.Equal(was, s.head), err
		}},
	}
}

// sameTerm reports whether two values of the coordinator's lease are of
// one term: the same holder's session, acquired at the same time. The
// epoch does not tell: a new leader writes its lease with none, and
// publishes the term's epoch in it once its fence is written (the
// coordinator's announce), so epoch 0 then N is one term, not a takeover.
func sameTerm(a, b *sluicev1.LeaderLease) bool {
	return a.GetHolder() == b.GetHolder() && a.GetSession() == b.GetSession() && proto.Equal(a.GetAcquiredAt(), b.GetAcquiredAt())
}

// applyTo stores data (nil: delete) at key and says whether a viewer would
// see a difference: quiet clears what changes without meaning anything
// (a heartbeat), so that a heartbeat alone is not sent to every viewer.
func applyTo[T proto.Message](kind string, m map[string]T, key string, data []byte, newT func() T, quiet func(T)) (string, bool, error) {
	old, had := m[key]
	if data == nil {
		delete(m, key)
		return kind, had, nil
	}
	v := newT()
	if err := store.Unmarshal(data, v); err != nil {
		return kind, false, err
	}
	m[key] = v
	if !had {
		return kind, true, nil
	}
	if quiet == nil {
		return kind, !proto.Equal(old, v), nil
	}
	a, b := proto.Clone(old).(T), proto.Clone(v).(T)
	quiet(a)
	quiet(b)
	return kind, !proto.Equal(a, b), nil
}

// follow watches every bucket and the events stream until ctx ends,
// rewatching after an error.
func (s *state) follow(ctx context.Context, js jetstream.JetStream, every time.Duration, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, w := range s.watchedBuckets() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			retry(ctx, func() error { return s.watchBucket(ctx, js, w) }, func(err error) {
				s.setWatchError(w.bucket, err)
				logf("dashboard: watch %s: %v (retrying)", w.bucket, err)
			})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watchStore(ctx, js, every, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.readTargets(ctx, js, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.readDesired(ctx, js, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.followApplied(ctx, js, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		retry(ctx, func() error { return s.followEvents(ctx, js, &last) }, func(err error) {
			s.setWatchError(contract.StreamEvents, err)
			logf("dashboard: follow %s: %v (retrying)", contract.StreamEvents, err)
		})
	}()
	wg.Wait()
}

func (s *state) setWatchError(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.watchErrors, name)
	} else {
		s.watchErrors[name] = err.Error()
	}
}

// retry runs f until ctx ends, waiting a growing pause (up to 5 s) after
// each error.
func retry(ctx context.Context, f func() error, onErr func(error)) {
	wait := 250 * time.Millisecond
	for ctx.Err() == nil {
		err := f()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		onErr(err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (s *state) watchBucket(ctx context.Context, js jetstream.JetStream, w watched) error {
	kv, err := js.KeyValue(ctx, w.bucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", w.bucket, err)
	}
	var watcher jetstream.KeyWatcher
	if w.key != "" {
		watcher, err = kv.Watch(ctx, w.key)
	} else {
		watcher, err = kv.WatchAll(ctx, w.opts...)
	}
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", w.bucket, err)
	}
	defer watcher.Stop()
	if w.bucket == contract.BucketLeases {
		if st, err := kv.Status(ctx); err == nil {
			s.mu.Lock()
			s.leaseTTL = st.TTL()
			s.mu.Unlock()
		}
	}
	s.setWatchError(w.bucket, nil)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil
			}
			s.mu.Lock()
			if e == nil {
				s.ready[w.bucket] = true
			} else if !contract.IsControlKey(e.Key()) {
				s.applyEntry(w, e)
			}
			s.mu.Unlock()
		}
	}
}

// applyEntry applies one watched entry; the caller holds mu.
func (s *state) applyEntry(w watched, e jetstream.KeyValueEntry) {
	if w.bucket == contract.BucketNodeConfigs {
		if node, _, ok := contract.NodeOfConfigKey(e.Key()); ok && e.Key() == contract.DesiredKey(node) {
			s.desiredWritten(node, e.Operation() != jetstream.KeyValuePut, keyWrite{at: e.Created(), rev: e.Revision()})
		}
		return
	}
	var data []byte
	if e.Operation() == jetstream.KeyValuePut {
		data = e.Value()
	}
	if w.bucket == contract.BucketLeases && e.Key() == contract.LeaseCoordinator {
		s.leaseEnd = nil
		if e.Operation() != jetstream.KeyValuePut {
			// The server's expiry marker reads as a purge, a release as a delete.
			s.leaseEnd = &leaseEnd{at: e.Created(), expired: e.Operation() == jetstream.KeyValuePurge}
		}
	}
	id := w.bucket + "/" + e.Key()
	kind, changed, err := w.apply(e.Key(), data)
	switch {
	case err != nil:
		s.unreadable[id] = view.NewUnreadable(w.bucket, e.Key(), err)
	default:
		delete(s.unreadable, id)
	}
	if changed && kind != "" {
		s.note(kind, e.Key(), nil)
	}
	switch {
	case kind == kindRollout || kind == kindActive:
		s.replaceAll()
	case kind == kindNode && changed:
		if w.bucket == contract.BucketNodes {
			delete(s.place.targets, e.Key()) // its labels may have changed
		}
		s.placeNode(e.Key(), false) // noted above
	}
}

// followEvents reads the events stream from after *last (or its last
// recentEvents on the first start), keeping the recent ones and noting
// each as a change.
func (s *state) followEvents(ctx context.Context, js jetstream.JetStream, last *uint64) error {
	stream, err := js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", contract.StreamEvents, err)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if *last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, *last+1
	} else {
		info, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", contract.StreamEvents, err)
		}
		if info.State.LastSeq > recentEvents {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, info.State.LastSeq-recentEvents+1
		}
	}
	it, _, err := view.EventMessages(ctx, stream, cfg)
	if err != nil {
		return err
	}
	defer it.Stop()
	s.setWatchError(contract.StreamEvents, nil)
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		*last = meta.Sequence.Stream
		b := eventJSON(msg.Subject(), msg.Data(), meta)
		s.mu.Lock()
		s.events = append(s.events, b)
		if len(s.events) > recentEvents {
			s.events = slices.Delete(s.events, 0, len(s.events)-recentEvents)
		}
		s.note(kindEvent, "", b)
		s.mu.Unlock()
	}
}

// streamEvent is an event as the stream sends it: the stream's sequence,
// and the stored event (or why it is unreadable: eventJSON).
type streamEvent struct {
	Seq        uint64          `json:"seq"`
	Event      json.RawMessage `json:"event,omitempty"`
	Unreadable string          `json:"unreadable,omitempty"`
}

// eventJSON is one message of the events stream as the page shows it: the
// event, or why it is unreadable (it does not decode, or it is not an
// event its subject's publishers may send: events.Read).
func eventJSON(subject string, data []byte, meta *jetstream.MsgMetadata) json.RawMessage {
	e := streamEvent{Seq: meta.Sequence.Stream}
	ev, err := events.Read(subject, data)
	if err != nil {
		e.Unreadable = err.Error()
	} else if e.Event, err = view.JSON(ev); err != nil {
		e.Unreadable = err.Error()
	}
	b, _ := json.Marshal(e) // a struct of raw JSON and strings
	return b
}

// fleet is every node, by name, with the revision in force where it runs
// it (as sluice get nodes); the caller holds mu.
func (s *state) fleet() []view.Node {
	return s.withInForce(view.MergeNodes(slices.Collect(maps.Values(s.presences)), slices.Collect(maps.Values(s.statuses))))
}

// node is one node, as in fleet; ok is false when it has neither presence
// nor status.
func (s *state) node(name string) (view.Node, bool) {
	p, s1 := s.presences[name], s.statuses[name]
	n := view.Node{Name: name, Presence: p, Status: s1}
	n.InForce = s.applied.Of(n)
	return n, p != nil || s1 != nil
}

// rolloutsNewestFirst; the caller holds mu.
func (s *state) rolloutsNewestFirst() []*sluicev1.Rollout {
	rs := slices.Collect(maps.Values(s.rollouts))
	view.SortRollouts(rs)
	return rs
}

// fingerprints newest first; the caller holds mu.
func (s *state) fingerprints() []*sluicev1.InvalidFingerprint {
	fs := slices.Collect(maps.Values(s.fps))
	view.SortFingerprints(fs)
	return fs
}

// instanceList is the services' instances, then every node's agent, as
// `sluice get pause` lists them; the caller holds mu.
func (s *state) instanceList() []*sluicev1.Instance {
	insts := slices.Collect(maps.Values(s.instances))
	slices.SortFunc(insts, func(a, b *sluicev1.Instance) int {
		return cmpStrings(a.GetComponent()+"\x00"+a.GetInstance(), b.GetComponent()+"\x00"+b.GetInstance())
	})
	for _, name := range slices.Sorted(maps.Keys(s.presences)) {
		p := s.presences[name]
		insts = append(insts, view.AgentInstance(p))
	}
	return insts
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// unreadableList, by bucket and key; the caller holds mu.
func (s *state) unreadableList() []view.Unreadable {
	out := make([]view.Unreadable, 0, len(s.unreadable))
	for _, k := range slices.Sorted(maps.Keys(s.unreadable)) {
		out = append(out, s.unreadable[k])
	}
	return out
}

// storeEvery is how often, by default, the dashboard checks the store for
// a loss and for storage trouble (Options.StoreEvery).
const storeEvery = 5 * time.Second

// watchStore runs checkStore every every until ctx ends.
func (s *state) watchStore(ctx context.Context, js jetstream.JetStream, every time.Duration, logf func(string, ...any)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.checkStore(ctx, js); err != nil && ctx.Err() == nil {
			logf("dashboard: %v (asking again in %s)", err, every)
		}
		t.Reset(every)
	}
}

// lossBuckets are the watched buckets a loss is judged from.
var lossBuckets = []string{contract.BucketNodes, contract.BucketRollouts, contract.BucketControl}

// checkStore notes a change of the two store banners: whether the store is
// lost (pkg/storeloss), and whether JetStream refuses writes for want of
// space (pkg/store.StorageTrouble). The loss is judged from what the
// watches keep (inForce, the rollouts, the confirmation): no read at all
// while the store records a rollout or nodes run no revision, as on a
// fresh install and in every steady state; else one Get per distinct
// revision the nodes run, whatever the fleet's size. A read or watch that
// fails says so in the banner (the error returned is for the log): it is no
// proof the store is whole.
func (s *state) checkStore(ctx context.Context, js jetstream.JetStream) error {
	s.mu.Lock()
	var running map[string]int
	ready, cannot := true, ""
	for _, b := range lossBuckets {
		ready = ready && s.ready[b]
		if e := s.watchErrors[b]; e != "" && cannot == "" {
			cannot = "watch " + b + ": " + e
		}
	}
	settled := s.lastApplied || s.confirmed || len(s.rollouts) > 0
	if !settled && ready && cannot == "" {
		running = maps.Clone(s.inForce)
		delete(running, "")
	}
	s.mu.Unlock()

	var err error
	held := map[string]bool{}
	for _, rev := range slices.Sorted(maps.Keys(running)) {
		if held[rev], err = s.held(ctx, js, rev); err != nil {
			cannot = err.Error()
			break
		}
	}
	say := ""
	switch {
	case cannot != "":
		say = "cannot tell whether the store is lost: " + cannot
		err = errors.New(say)
	case !ready:
		// The watches have not read every value yet: nothing to judge.
	default:
		if loss := storeloss.JudgeCounts(settled, running, held); loss != nil {
			say = loss.String() + ": nothing is started (no rollout, no deletion) until you recover; " + storeloss.WayOut
		}
	}
	full := ""
	if se, since := s.trouble(); se != nil {
		full = fmt.Sprintf("JetStream refuses writes since %s: %v", since.UTC().Format(time.RFC3339), se)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if (ready || cannot != "") && say != s.storeLoss {
		s.storeLoss = say
		s.note(kindStoreLoss, "", nil)
	}
	if full != s.storage {
		s.storage = full
		s.note(kindStorage, "", nil)
	}
	return err
}

// held says whether the store holds revision id (a value, readable or
// not, as storeloss.Read), binding the revisions bucket on first need.
func (s *state) held(ctx context.Context, js jetstream.JetStream, id string) (bool, error) {
	if s.revisions == nil {
		kv, err := js.KeyValue(ctx, contract.BucketRevisions)
		if err != nil {
			return false, fmt.Errorf("open bucket %s: %w", contract.BucketRevisions, err)
		}
		s.revisions = kv
	}
	_, err := store.New(s.revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Get(ctx, id)
	switch {
	case err == nil, errors.Is(err, store.ErrUndecodable):
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, id, err)
}
