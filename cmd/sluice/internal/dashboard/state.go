package dashboard

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/store"
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
