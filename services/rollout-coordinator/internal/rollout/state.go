package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// progress is where a node is in the active rollout's forward direction.
// Once final (provisioned, failed, timed out, skipped, refused) it stays: a
// revert does not change what happened, so counts stay exact.
type progress uint8

const (
	progNone         progress = iota // not part of the active rollout
	progPending                      // waiting for a slot
	progInFlight                     // desired config written, no final report yet
	progProvisioned                  // reported Provisioned with the target fingerprint
	progFailed                       // reported Invalid with the target fingerprint
	progTimedOut                     // no final report within its deadline
	progSkipped                      // left before finishing
	progRefused                      // its target is a known-bad fingerprint: never touched
	progStopped                      // in flight when the rollout stopped: no outcome
	progIncompatible                 // its agent cannot read its target (incompatible.go): skipped
)

func (p progress) String() string {
	return [...]string{"none", "pending", "in-progress", "provisioned", "failed", "timed-out", "skipped",
		"refused", "stopped", "incompatible"}[p]
}

// revertState is where a touched node is in the revert after the rollout stopped.
type revertState uint8

const (
	revNone     revertState = iota
	revQueued               // waiting for a slot
	revInFlight             // backup written back, no report yet
	revDone                 // reported its backup in force
	revFailed               // the revert failed, timed out or had no safe target
)

// node is what the coordinator knows of one node. The stored values it
// keeps are the small structs of facts.go, not the decoded messages.
type node struct {
	name    string
	labels  *labelSet // shared with every node of equal labels
	status  *report
	desired *desired // as last read or written
	backup  *desired // its backup key, as last read or written

	// Within the active rollout:
	domain    string               // sort key of its failure-domain value
	target    string               // fingerprint the rollout (or revert) puts on this node
	forward   string               // the rollout's target for it, kept while it is reverted
	config    *sluicev1.NodeConfig // target's config, shared: never changed
	previous  *desired             // desired config before this rollout wrote it: the revert target
	writtenAt time.Time            // when its desired config write landed (Written), in this term; zero before
	ackAt     time.Time            // when its agent acknowledged (Provisioning); zero before
	// before is what it ran before the active rollout touched it when no
	// stored value says it: nil unless its store was lost (storeloss.go).
	before    *ran
	pauseAck  agentPause // the control-plane pause its agent reached (its presence)
	startedAt stamp      // when its agent started, as its presence last said
	// What its agent reads and runs, as its presence last said
	// (incompatible.go): its config features, version and config in force,
	// shared with every node whose agent says the same (nil: it said
	// nothing).
	agent *agentReads

	group *pairGroup // its redundancy group in the active rollout (pairs.go), nil when none
	due   time.Time  // when it becomes late, while in flight (flight.go)

	// Its places in the queues holding it (queue.go): pending, the revert
	// queue, and in flight by deadline (due), by name, and by name among
	// those the control plane's pause waits for.
	pi, ri, di, ni, wi int32

	stage  int32  // the stage it was started in (bakechecks.go)
	passes uint32 // re-runs of its checks passed on its target, as its status says (bakechecks.go)

	// The small fields last, side by side, so that the struct has no
	// padding between them (it is kept once per node of the fleet).
	prog    progress
	rev     revertState
	present bool
	touched bool // this rollout wrote its desired config
	unbaked bool // provisioned by the active rollout, its stage's bake not yet passed (pairs.go)
}

// State is everything Decide needs. The loop owns it; only Decide changes it.
type State struct {
	head           *sluicev1.Head
	headRev        *sluicev1.Revision
	lastApplied    *sluicev1.RolloutRef
	lastAppliedRev *sluicev1.Revision
	// Nodes told they cannot be configured while lastAppliedRev cannot be
	// read (noteUnrenderable); nil when none.
	unrenderable map[string]bool
	invalid      map[string]*sluicev1.InvalidFingerprint
	// forgiven is when each fingerprint was retried on purpose in this
	// term: an older Invalid report an agent still carries does not record
	// it again.
	forgiven map[string]time.Time
	// startedGen is the highest head generation a rollout was ever started
	// for, as far as the stored records say: a generation is rolled out once.
	startedGen uint64
	// storeLost is the lost store as last read ("" = not lost): no
	// rollout starts while it is set; heldGen is the head generation last
	// reported held for it (storeloss.go).
	storeLost string
	heldGen   uint64
	// storeConfirmed: an operator confirmed a lost store (storeloss.go).
	storeConfirmed bool

	rollout    *sluicev1.Rollout // the active rollout, nil when none
	rolloutRev *sluicev1.Revision
	// unseen are the nodes this term took as present on the active
	// rollout's write alone: at load their presence key held a value that
	// does not decode (garbage over it), so their labels are unknown and
	// their target is what the rollout wrote them (takeUnseen). Nil when
	// none; a readable presence, a lapse or the rollout's end clears it.
	unseen     map[string]bool
	plan       plan
	pending    queue         // by (domain, name)
	inFlight   flight        // desired (or revert) written, no outcome yet
	started    int           // nodes started in this rollout (for waves)
	domainSet  bool          // a failure-domain value is in progress
	bakeUntil  time.Time     // no node starts before it (bake.go)
	bakeLeft   time.Duration // a pause holds the bake with this much left; bakeUntil is zero meanwhile
	baked      bool          // the bake before the next stage is over
	reverting  bool          // stopped over budget: putting touched nodes back
	revertQ    queue         // by name
	stopReason string        // why the rollout stopped, for the final reason
	// leftUnled counts the nodes the previous term counted in the rollout
	// and this term found gone (presence lapsed while no coordinator led).
	leftUnled int
	clockBase time.Duration // leader time the rollout had at the start of this term
	clockFrom time.Time     // start of this term (or of the rollout)
	heldAt    time.Time     // when a pause began holding the rollout: its clock stands still since
	// freezes are the operators' freezes (control/freeze.<id>), by id.
	freezes map[string]*sluicev1.Freeze
	// waitingWindow: the next wave waits for one of the strategy's windows
	// to open (scheduling.go); the clock stands still meanwhile too.
	waitingWindow bool
	// gates are what the active rollout's gates said (gates.go).
	gates gateState
	// evid counts the stage's nodes by re-run checks passed; evidWaiting:
	// the bake's time is over and the next stage waits for them
	// (bakechecks.go).
	evid        evidence
	evidWaiting bool
	bakeSpec    *sluicev1.BakeChecks // what the rollout's writes ask agents to re-run, nil for none

	// Pause (pause.go): the control plane's request, each rollout's, and
	// the acknowledgement of the control plane's last handed to the loop.
	pause        *sluicev1.PauseRequest
	rolloutPause map[string]*sluicev1.PauseRequest
	ack          *sluicev1.PauseAck
	// busyWhy is busy's answer for a rollout's pause [0] and the control
	// plane's [1], while busyKnown; Decide forgets it after any step that
	// may have changed the nodes in flight.
	busyWhy   [2]string
	busyKnown [2]bool
	// announced is the set of the nodes in the Reverted list of rollout
	// announcedFor's record, of announcedLen entries (revert.go).
	announced    map[string]bool
	announcedFor string
	announcedLen int
	// revertNotes says why a queued or reverting node's revert target is
	// not its backup, for the nodes where it is not (queueRevert).
	revertNotes map[*node]string

	invalidExpiry time.Duration // 0: records of invalid fingerprints never expire

	nodes map[string]*node

	// What nodes share (facts.go): label sets by their canonical key,
	// configs by fingerprint, interned strings, reports and desired configs; noLabels stands for the
	// labels of a node whose presence was never read.
	labelSets map[string]*labelSet
	configs   map[string]*sluicev1.NodeConfig
	strs      map[string]string
	agents    map[agentReads]*agentReads // what agents read, shared (incompatible.go)
	reports   map[report]*report         // reports that carry no failure, shared (keepReport)
	desireds  map[desired]*desired       // desired configs made in this term, shared (shareDesired)
	noLabels  labelSet

	// Redundancy groups of the active rollout (pairs.go): by name; the
	// members provisioned and awaiting a bake; the pending node last said
	// to wait for its group.
	groups   map[string]*pairGroup
	unbaked  []*node
	pairWait string

	// next is the newest head waiting for the running rollout to end (its
	// strategy's whileActive says whether it stops that one first).
	next    *sluicev1.Head
	nextRev *sluicev1.Revision

	// One Decide step's output.
	out    []Action
	events []*sluicev1.Event
	dirty  bool // the rollout record changed
}

// NewState returns an empty state; the Loaded event fills it.
func NewState() *State {
	s := &State{nodes: map[string]*node{}, invalid: map[string]*sluicev1.InvalidFingerprint{}, inFlight: newFlight(),
		forgiven: map[string]time.Time{}, rolloutPause: map[string]*sluicev1.PauseRequest{},
		revertQ:   queue{less: nameLess, at: func(n *node) *int32 { return &n.ri }},
		labelSets: map[string]*labelSet{}, configs: map[string]*sluicev1.NodeConfig{}, strs: map[string]string{},
		agents: map[agentReads]*agentReads{}, reports: map[report]*report{},
		desireds: map[desired]*desired{}, revertNotes: map[*node]string{}}
	// Nodes waiting for their redundancy group last (pairs.go), then by
	// place.
	s.pending = queue{less: func(a, b *node) bool {
		if ha, hb := s.held(a), s.held(b); ha != hb {
			return hb
		}
		return byPlace(a, b) < 0
	}, at: func(n *node) *int32 { return &n.pi }}
	return s
}

func (s *State) nodeOf(name string) *node {
	n := s.nodes[name]
	if n == nil {
		// A copy: a name read from a bucket may be part of a larger string
		// (the loop's keys are cut from the message subject), which the
		// state would otherwise keep whole for as long as the node.
		n = &node{name: strings.Clone(name)}
		s.nodes[n.name] = n
	}
	return n
}

// elapsed is the time the active rollout has run under a leader.
func (s *State) elapsed(now time.Time) time.Duration {
	if !s.heldAt.IsZero() {
		now = s.heldAt
	}
	return s.clockBase + now.Sub(s.clockFrom)
}

// setProg moves n's forward progress to p, keeping the rollout's counts.
// Failed counts every node that failed, timed out or was refused; TimedOut
// says how many of those timed out. Skipped counts every node that left or
// whose agent cannot read its target; Incompatible says how many of those
// could not read it.
func (s *State) setProg(n *node, p progress) {
	c := s.rollout.Counts
	if f := progCounter(c, n.prog); f != nil {
		*f--
	}
	switch n.prog {
	case progTimedOut:
		c.Failed--
	case progIncompatible:
		c.Skipped--
	}
	from := n.prog
	n.prog = p
	if from == progStopped {
		s.unlistStopped(n.name)
	}
	if p == progStopped {
		s.listStopped(n.name)
	}
	s.regroup(n, from, p)
	s.evidenceMoved(n, from, p)
	if f := progCounter(c, p); f != nil {
		*f++
	}
	switch p {
	case progTimedOut:
		c.Failed++
	case progIncompatible:
		c.Skipped++
	}
	s.changed()
}

// listStopped names node in the record's stopped_nodes, which stays
// sorted and holds at most maxListed names (the first by name):
// counts.stopped says how many there are in all.
func (s *State) listStopped(node string) {
	r := s.rollout
	i, found := slices.BinarySearch(r.StoppedNodes, node)
	if found || i >= maxListed {
		return
	}
	r.StoppedNodes = slices.Insert(r.StoppedNodes, i, node)
	if len(r.StoppedNodes) > maxListed {
		r.StoppedNodes = r.StoppedNodes[:maxListed]
	}
}

// unlistStopped takes node off the record's stopped_nodes: a late report
// moved it from stopped to failed (the failures name it).
func (s *State) unlistStopped(node string) {
	r := s.rollout
	if i, found := slices.BinarySearch(r.StoppedNodes, node); found {
		r.StoppedNodes = slices.Delete(r.StoppedNodes, i, i+1)
	}
}

func progCounter(c *sluicev1.RolloutCounts, p progress) *uint32 {
	switch p {
	case progPending:
		return &c.Pending
	case progInFlight:
		return &c.InProgress
	case progProvisioned:
		return &c.Provisioned
	case progFailed, progRefused:
		return &c.Failed
	case progTimedOut:
		return &c.TimedOut
	case progSkipped:
		return &c.Skipped
	case progStopped:
		return &c.Stopped
	case progIncompatible:
		return &c.Incompatible
	}
	return nil
}

// setRev moves n's revert state to r, keeping the rollout's counts.
func (s *State) setRev(n *node, r revertState) {
	c := s.rollout.Counts
	if f := revCounter(c, n.rev); f != nil {
		*f--
	}
	n.rev = r
	if f := revCounter(c, r); f != nil {
		*f++
	}
	s.changed()
}

func revCounter(c *sluicev1.RolloutCounts, r revertState) *uint32 {
	switch r {
	case revQueued, revInFlight:
		return &c.Reverting
	case revDone:
		return &c.Reverted
	case revFailed:
		return &c.RevertFailed
	}
	return nil
}

// failures counts the nodes that count against the failure budget.
func (s *State) failures() int {
	return int(s.rollout.Counts.GetFailed())
}

func (s *State) sortedNodes() []string {
	names := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// byPlace orders pending nodes: failure domain, then name. byName orders
// the revert queue and the nodes in flight.
func byPlace(a, b *node) int {
	return cmp.Or(cmp.Compare(a.domain, b.domain), cmp.Compare(a.name, b.name))
}
func byName(a, b *node) int    { return cmp.Compare(a.name, b.name) }
func nameLess(a, b *node) bool { return a.name < b.name }

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// checkFailed says that check failed, with the agent's message: the
// check's name once, whether or not the message starts with it (the
// agent's does: "ping failed: exit status 1; restored …").
func checkFailed(check, msg string) string {
	if strings.HasPrefix(msg, check+" failed") {
		return msg
	}
	return fmt.Sprintf("check %s failed: %s", check, msg)
}

// dropPending takes every pending node out of the rollout's queue: never
// started, each is still counted in the total, as not started.
func (s *State) dropPending() {
	for _, n := range s.pending.all() {
		s.setProg(n, progNone)
		s.rollout.Counts.NotStarted++
	}
	s.pending.clear()
}
