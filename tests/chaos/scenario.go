package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Behaviour is how a node reacts to one change's config.
type Behaviour int

const (
	Healthy   Behaviour = iota
	FailCheck           // the health check fails after the apply
	FailApply           // the applier returns an error
	Hang                // the applier never returns (until the agent's apply timeout): the node times out
	// NodeDown: the node cannot apply any config (its routing daemon is
	// down): the agent's validation says so (agent.ErrNodeFault), nothing
	// is applied, and the node is Invalid with node_fault, a failure whose
	// fingerprint is not recorded invalid (I9).
	NodeDown
)

func (b Behaviour) String() string {
	return [...]string{"healthy", "fail-check", "fail-apply", "hang", "node-down"}[b]
}

// Change is one apply the user makes: a fleet-wide routing table whose id
// makes every node's config change, with a strategy, and how nodes react.
type Change struct {
	TableID   uint32
	Strategy  *sluicev1.Strategy
	Behaviour map[string]Behaviour // nodes not listed are healthy
	// Supersede: applied while the previous change still rolls out, After
	// its apply (Strategy.whileActive says whether it queues or stops that
	// rollout); otherwise after the previous rollout ended.
	Supersede bool
	After     time.Duration
}

// FaultKind is one kind of injected fault.
type FaultKind string

const (
	KillLeader       FaultKind = "kill-leader"       // stop the lease holder; restart it after Down
	KillConfigurator FaultKind = "kill-configurator" // stop the configurator; restart it after Down
	KillAgent        FaultKind = "kill-agent"        // stop a node's agent mid-apply; restart it after Down (< node lease)
	AgentLeave       FaultKind = "agent-leave"       // stop a node's agent past its lease and the reaper's grace; rejoin after Down
	RestartNATS      FaultKind = "restart-nats"      // shut the server down; start it again on the same store after Down
	KillServer       FaultKind = "kill-server"       // R3 seeds: stop one server of the cluster (Node names it); restart it after Down
	PausedLeader     FaultKind = "paused-leader"     // freeze the leader's writes and clock past its lease; wake it after the standby wrote
	NetDrop          FaultKind = "net-drop"          // close a component's connections (Node: "leader", configurator, reaper or a node): requests in flight go unanswered
	NetStall         FaultKind = "net-stall"         // hold a component's traffic for Down: its requests time out, answers arrive late
	PausePlane       FaultKind = "pause-plane"       // sluice pause; once every live instance acknowledged, nothing may start for Down; then resume
	GarbageValue     FaultKind = "garbage-value"     // raw Puts of values not well-formed for their keys (Garbage), into existing and fresh keys of every bucket
	PartialRegistry  FaultKind = "partial-registry"  // the registry's directory drops files (Trickle), which then come back one at a time, within the settle period or, refilling, more slowly
	// PauseAway: a node leaves or comes back while the control plane is
	// paused and every instance acknowledged (Paused is checked as for
	// pause-plane). After an apply: a node whose forward operation its agent
	// holds leaves (its skip frees a slot the pause must keep empty). When
	// the rollout ended: Node leaves until its keys are reaped, and comes
	// back as a joiner while paused (it must be left alone: joiners freeze).
	PauseAway FaultKind = "pause-away"
	// LeaveUntilRevert: Node leaves once it applied the rollout's target and
	// comes back as soon as its presence expired and the rollout reverts;
	// the scenario's revert applies wait (RevertGate) so that the revert
	// still runs then: a touched node that comes back during a revert must
	// be reverted (Revert).
	LeaveUntilRevert FaultKind = "leave-until-revert"
	// StaleDesired: a deposed leader's desired config lands (as it would
	// without the fence on the write): right after change Change's apply
	// the leader is stopped (a new term, a higher epoch), and once the last
	// rollout ended a node's desired key gets an earlier desired config of
	// it, of a lower epoch, compare-and-set over its current one. Its agent
	// must ignore it (docs/agent.md: the epoch check on the read).
	StaleDesired FaultKind = "stale-desired"
	// JoinDuringRevert: Node leaves as the rollout of change Change ends,
	// the next change is applied only once its presence expired (so that
	// its rollout does not count it), and it comes back as a joiner while
	// that rollout reverts; the revert applies wait (RevertGate) so that the
	// revert still runs then. A node that joins during a revert is given the
	// config in force, never the rolled-back target (JoinedRevert).
	JoinDuringRevert FaultKind = "join-during-revert"
	// AwayPastGrace: the harness pauses change Change's rollout so that it
	// stays active, and stops a node that applied its target (Node if it
	// did); the node stays away past its presence's expiry, the reaper's
	// grace and one interval of its passes, then the rollout is resumed and the node
	// started again. The reaper must keep every key of a node the active
	// rollout references (I5).
	AwayPastGrace FaultKind = "away-past-grace"
	// RegistryHold: the registry drops more of its files than its hold
	// share lets be pending (a mass deletion, Hold), and keeps them out
	// longer than the settle period; in most of them the harness then
	// confirms the held deletion as `sluice registry confirm` does. The
	// deletion must be held, nothing marked, until the confirmation, which
	// marks the dropped intents (Hold).
	RegistryHold FaultKind = "registry-hold"
	// RegistryConfirmPending: the registry drops a few of its files (no
	// more than its hold share: a pending deletion, not a held one), and
	// while they wait out the settle period the harness confirms the
	// pending set as `sluice registry confirm` does; the confirmation must
	// mark them at once, and a file dropped after it (not in the confirmed
	// set) must not be marked early (ConfirmPending, I7).
	RegistryConfirmPending FaultKind = "registry-confirm-pending"
	// RegistryRewind: a git registry's branch is force-pushed to an older
	// commit that lacks 1 to half of its intents (no more than the hold
	// share: were it synced, a pending deletion), for longer than the
	// settle period, then to its head again. A rewound branch is held,
	// never synced: none of those intents may be marked (I7).
	RegistryRewind FaultKind = "registry-rewind"
)

// TriggerKind says when a fault fires.
type TriggerKind string

const (
	AfterApply TriggerKind = "after-apply" // Delay after change Change was applied
	Reverting  TriggerKind = "reverting"   // the rollout of change Change is REVERTING
	Ended      TriggerKind = "ended"       // right after the rollout of change Change wrote its terminal record
	Applying   TriggerKind = "applying"    // Node's applier is inside Apply for change Change's config
)

// Fault is one entry of a fault schedule.
type Fault struct {
	Kind    FaultKind
	Trigger TriggerKind
	Change  int // index into Scenario.Changes
	Delay   time.Duration
	Node    string          // for agent faults
	Down    time.Duration   // how long the component stays down
	Garbage []GarbageWrite  // garbage-value: the writes, in order
	Trickle *Trickle        // partial-registry: what the directory drops and how it comes back
	Hold    *Hold           // registry-hold: what the directory drops, for how long, and whether it is confirmed
	Pending *PendingConfirm // registry-confirm-pending: what the directory drops, and the file that leaves after the confirmation
	Rewind  *Rewind         // registry-rewind: the older commit the branch is force-pushed to, and for how long
}

// Rewind is what a registry-rewind fault does to a git registry: it
// force-pushes the branch to the older commit that holds only intents
// 0 … Keep-1 (the fill's commits, regstore_git.go) and after For puts its
// head back.
type Rewind struct {
	Keep int
	For  time.Duration
	// Every rewind crosses a restart of the configurator, which must then
	// hold the branch from the commit in force it stored (seed 117). Down:
	// the force-push is made while it is down; else it is restarted once
	// the running one held the branch.
	Down bool
}

func (r *Rewind) String() string {
	s := fmt.Sprintf("force-pushes the branch to the commit holding reg-1 … reg-%d for %s", r.Keep, r.For.Round(time.Millisecond))
	if r.Down {
		return s + ", pushed while the configurator is down"
	}
	return s + ", the configurator restarted once it holds it"
}

// pickRewind draws a registry-rewind fault from a source of its own: the
// older commit lacks 1 to half (rounded down) of the intents, so that a
// configurator that synced it would have them pending, and marked once
// the settle period ran out, which the rewind outlasts by 3–5 s; one in
// two is pushed while the configurator is down.
func (s Scenario) pickRewind() Fault {
	rng := rand.New(rand.NewPCG(s.Seed, 0x4e717d))
	n := s.Registry.Intents
	r := &Rewind{Keep: n - 1 - rng.IntN(n/2), For: registrySettle + 3*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))}
	f := Fault{Kind: RegistryRewind, Change: 1 + rng.IntN(len(s.Changes)-1), Trigger: AfterApply,
		Delay: time.Duration(rng.IntN(800)) * time.Millisecond, Rewind: r}
	r.Down = rng.IntN(2) == 0 // drawn last: the draws before it are what they were
	return f
}

// PendingConfirm is what a registry-confirm-pending fault does: it drops
// Drop (indexes into reg-1 … reg-N, no more than the hold share of them:
// pending), confirms the pending set as soon as the registry's status
// names it, waits until its intents are marked, then drops Then (a file
// not in the confirmed set) for For (less than the settle period) and
// brings every file back.
type PendingConfirm struct {
	Drop []int
	Then int
	For  time.Duration
}

func (p *PendingConfirm) String() string {
	files := make([]string, len(p.Drop))
	for i, f := range p.Drop {
		files[i] = regName(f)
	}
	return fmt.Sprintf("drops %s, confirms the pending deletion, then drops %s for %s", strings.Join(files, ", "),
		regName(p.Then), p.For.Round(time.Millisecond))
}

// Hold is what a registry-hold fault does: it drops Drop (indexes into
// reg-1 … reg-N, more than the hold share of them), keeps them out For
// (longer than the settle period), then confirms the held deletion if
// Confirm says so (and waits until its intents are marked), and brings
// the files back.
type Hold struct {
	Drop    []int
	For     time.Duration
	Confirm bool
}

func (h *Hold) String() string {
	files := make([]string, len(h.Drop))
	for i, f := range h.Drop {
		files[i] = regName(f)
	}
	then := "brings them back unconfirmed"
	if h.Confirm {
		then = "confirms the held deletion, then brings them back"
	}
	return fmt.Sprintf("drops %s for %s, then %s", strings.Join(files, ", "), h.For.Round(time.Millisecond), then)
}

// GarbageWrite is one raw Put of a value that is not well-formed for its
// key, as a bug or an attacker with write access would make it (no
// compare-and-set). The key is drawn here but found when the fault fires:
// Pick indexes the bucket's keys at that moment, or numbers a fresh key.
type GarbageWrite struct {
	Bucket string
	Fresh  bool   // a key that does not exist; else one the bucket holds
	Pick   uint32 // which existing key (index mod their number, sorted), or the fresh key's number
	Value  Garbage
	From   int // foreign: the first candidate tried (garbageCandidates)
}

// Garbage is the kind of value a GarbageWrite puts.
type Garbage string

const (
	Foreign   Garbage = "foreign"   // valid JSON of another type: another message, or a value of another bucket
	Truncated Garbage = "truncated" // the key's value (or a foreign one) cut short
	Empty     Garbage = "empty"     // no bytes
)

func (g GarbageWrite) String() string {
	which := fmt.Sprintf("key #%d", g.Pick)
	if g.Fresh {
		which = fmt.Sprintf("fresh key #%d", g.Pick)
	}
	return fmt.Sprintf("%s %s %s", strings.TrimPrefix(g.Bucket, "sluice-"), which, g.Value)
}

// RegistryPlan: the scenario declares some intents through a registry
// (registryName), one file or key each, besides the driver's own. Their
// routing tables select no node, so they change no node's config: what
// the partial-registry fault can break is only visible as a deletion (I7).
type RegistryPlan struct {
	Intents int // reg-1 … reg-N, in reg-<i>.yaml or the key sluice:intents:routingtable.reg-<i>
	// Redis: the registry is a redis-server the harness starts for the
	// seed (on real time; on virtual time the directory, see pickRedis).
	Redis bool
	// Git: the registry is a git repository the harness makes for the
	// seed (regstore_git.go), on real and virtual time: half the registry
	// seeds that are not Redis ones (pickGit).
	Git bool
}

// pickGit draws, from a source of its own so that no other draw of the
// seed moves, whether a registry seed that is not a Redis one reads a git
// repository instead of a directory: half of them. The faults it draws
// stay what they were; the git ones add a registry-rewind (pickRewind).
func pickGit(seed uint64) bool {
	return !pickRedis(seed) && rand.New(rand.NewPCG(seed, 0x617)).IntN(2) == 0
}

// redisRegistries: whether registry seeds draw a Redis registry at all
// (pickRedis).
const redisRegistries = true

// pickRedis draws, from a source of its own so that no other draw of the
// seed moves, whether the seed's registry is a Redis one: half of them.
// On virtual time the harness uses the directory for it all the same: the
// adapter's keyspace subscription waits on a TCP socket, which the bubble
// cannot see, so its clock would never move (as for inotify, docs/chaos.md).
func pickRedis(seed uint64) bool {
	return redisRegistries && rand.New(rand.NewPCG(seed, 0x7ed15)).IntN(2) == 0
}

// Trickle is what a partial-registry fault does to the registry's
// directory: Drop some of its files, all of them (an empty answer), or the
// directory itself (an unreachable registry); then the dropped files come
// back one at a time in Back's order, Gaps[i] before the i-th. A file
// listed twice in Back flaps: after its first return it leaves again with
// the next file's return, and its second listing brings it back.
//
// Shape says how the gaps compare with the settle period: "trickle"
// (every file back within it), "refill" (each gap shorter than it, the
// whole refill longer: a Redis restored key by key, a directory copied back
// file by file, an answer that keeps growing), "stall" (a refill whose last
// gap is longer than the settle period: the answer stops growing while a
// file is still missing, which the rule then deletes) and "flap" (a refill
// in which a file comes back, leaves and comes back).
type Trickle struct {
	Drop  string // "some", "all" or "gone"
	Shape string // "trickle" (zero value), "refill", "stall" or "flap"
	Back  []int  // the dropped files (index into reg-1 … reg-N), in the order they come back
	Gaps  []time.Duration
}

func (t *Trickle) String() string {
	var back []string
	for i, f := range t.Back {
		step := fmt.Sprintf("+%s reg-%d", t.Gaps[i].Round(time.Millisecond), f+1)
		if k := t.leavesAgain(i); k >= 0 {
			step += fmt.Sprintf(" (reg-%d leaves again)", t.Back[k]+1)
		}
		back = append(back, step)
	}
	shape := ""
	if t.Shape != "" {
		shape = " (" + t.Shape + ")"
	}
	return fmt.Sprintf("drops %s%s, back: %s", t.Drop, shape, strings.Join(back, ", "))
}

// leavesAgain is the step of the flapping file that leaves again with step
// i's return (the step right after its first return), or -1.
func (t *Trickle) leavesAgain(i int) int {
	if i == 0 {
		return -1
	}
	f := t.Back[i-1]
	if slices.Index(t.Back, f) == i-1 && slices.Index(t.Back[i:], f) >= 0 {
		return i - 1
	}
	return -1
}

func (f Fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", f.Kind)
	if f.Node != "" {
		fmt.Fprintf(&b, " %s", f.Node)
	}
	fmt.Fprintf(&b, " when %s of change %d", f.Trigger, f.Change)
	if f.Trigger == AfterApply {
		fmt.Fprintf(&b, " +%s", f.Delay)
	}
	switch {
	case f.Kind == GarbageValue:
		ws := make([]string, len(f.Garbage))
		for i, g := range f.Garbage {
			ws[i] = g.String()
		}
		fmt.Fprintf(&b, ": %s", strings.Join(ws, "; "))
	case f.Trickle != nil:
		fmt.Fprintf(&b, ": %s", f.Trickle)
	case f.Hold != nil:
		fmt.Fprintf(&b, ": %s", f.Hold)
	case f.Pending != nil:
		fmt.Fprintf(&b, ": %s", f.Pending)
	case f.Rewind != nil:
		fmt.Fprintf(&b, ": %s", f.Rewind)
	default:
		fmt.Fprintf(&b, ", down %s", f.Down)
	}
	return b.String()
}

// Scenario is everything a seed decides.
type Scenario struct {
	Seed      uint64
	Nodes     int
	NodeLease time.Duration
	Standby   bool // run a second coordinator
	Cluster   bool // a 3-server cluster with R3 buckets instead of one server
	Slow      map[string]time.Duration
	ApplyTime time.Duration // every apply takes this long, plus Slow
	Changes   []Change
	Faults    []Fault
	Registry  *RegistryPlan // nil: no registry; the driver declares every intent
	Extras    Extras        // pairs, freezes, windows, gates: drawn from a stream of their own (extras.go)
	Skew      *SkewPlan     // version skew (skew.go); nil: every agent is of this version
	// StoreLoss: once the last rollout ended and the checks at rest ran,
	// the store is wiped while the agents keep their state (storeloss.go).
	StoreLoss bool
	// RevertGate: every revert apply waits until the leave-until-revert
	// fault's node is back (or at most this long), so that the revert still
	// runs when it comes back. Zero: reverts take the apply time.
	RevertGate time.Duration
}

// NodeName is the i-th node's name.
func NodeName(i int) string { return fmt.Sprintf("node-%02d", i+1) }

// NodeLabels spreads nodes over three zones and two racks.
func NodeLabels(i int) map[string]string {
	return map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3), "rack": fmt.Sprintf("rack-%d", 1+i/3%2)}
}

// Pick derives a scenario from seed, deterministically.
func Pick(seed uint64) Scenario {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	s := Scenario{
		Seed:      seed,
		Nodes:     3 + rng.IntN(10),
		NodeLease: time.Second + time.Duration(rng.IntN(3))*500*time.Millisecond,
		Standby:   rng.IntN(2) == 0,
		Cluster:   rng.IntN(4) == 0,
		ApplyTime: time.Duration(10+rng.IntN(41)) * time.Millisecond,
		Slow:      map[string]time.Duration{},
	}
	nodes := make([]string, s.Nodes)
	for i := range nodes {
		nodes[i] = NodeName(i)
	}
	for _, n := range nodes {
		if rng.IntN(5) == 0 {
			s.Slow[n] = time.Duration(100+rng.IntN(300)) * time.Millisecond
		}
	}
	// The first change is good and rolls out quickly: the baseline.
	s.Changes = append(s.Changes, Change{TableID: 100, Strategy: &sluicev1.Strategy{MaxParallel: strconv.Itoa(s.Nodes)}})
	// The second may fail on some nodes; a third sometimes follows.
	s.Changes = append(s.Changes, s.pickChange(rng, nodes, 200))
	if rng.IntN(3) == 0 {
		c := s.pickChange(rng, nodes, 300)
		c.Supersede = rng.IntN(2) == 0
		c.After = time.Duration(100+rng.IntN(900)) * time.Millisecond
		s.Changes = append(s.Changes, c)
	}
	s.Faults = s.pickFaults(rng, nodes)
	// Drawn last, so that adding it kept every earlier draw of a seed.
	if c := &s.Changes[len(s.Changes)-1]; c.Supersede {
		c.Strategy.WhileActive = contract.WhileActiveQueue
		if rng.IntN(2) == 0 {
			c.Strategy.WhileActive = contract.WhileActiveSupersede
		}
	}
	// Drawn after everything above, for the same reason.
	if rng.IntN(3) == 0 {
		s.Faults = append(s.Faults, Fault{Kind: PausePlane, Trigger: AfterApply, Change: 1 + rng.IntN(len(s.Changes)-1),
			Delay: time.Duration(rng.IntN(800)) * time.Millisecond, Down: time.Duration(200+rng.IntN(800)) * time.Millisecond})
	}
	// Drawn after everything above, for the same reason: a third of the
	// seeds declare intents through a registry, and most of those make its
	// answers partial; a third write garbage into the buckets.
	if rng.IntN(3) == 0 {
		s.Registry = &RegistryPlan{Intents: 3 + rng.IntN(3), Redis: pickRedis(seed), Git: pickGit(seed)}
		if rng.IntN(3) != 0 {
			s.Faults = append(s.Faults, s.pickTrickle(rng))
		}
	}
	if rng.IntN(3) == 0 {
		s.Faults = append(s.Faults, s.pickGarbage(rng))
	}
	// Drawn after everything above, for the same reason (issue 22: the
	// schedules that reach the pause's and the revert's joiner paths).
	if rng.IntN(4) == 0 {
		s.Faults = append(s.Faults, s.pickPauseAway(rng, nodes))
	}
	if rng.IntN(5) == 0 {
		s.Faults = append(s.Faults, Fault{Kind: StaleDesired, Trigger: AfterApply, Change: 1,
			Down: time.Duration(rng.IntN(300)) * time.Millisecond})
	}
	if s.Standby && rng.IntN(3) == 0 { // a third of the standby seeds: one more deposed leader
		s.Faults = append(s.Faults, Fault{Kind: PausedLeader, Trigger: AfterApply, Change: 1 + rng.IntN(len(s.Changes)-1),
			Delay: time.Duration(rng.IntN(800)) * time.Millisecond})
	}
	if c := s.rollsBack(); c > 0 && rng.IntN(2) == 0 {
		s.Faults = append(s.Faults, Fault{Kind: LeaveUntilRevert, Trigger: AfterApply, Change: c,
			Delay: time.Duration(rng.IntN(300)) * time.Millisecond, Node: s.leaver(rng, nodes, c)})
		// Below the apply deadline (lease + 1.5 s) less the time to ack.
		s.RevertGate = s.NodeLease + 500*time.Millisecond
	}
	// Drawn after everything above, for the same reason: a node that joins
	// while a rollout reverts (not the leave-until-revert node, not one
	// that fails the change: it is not in the rollout).
	if c := s.rollsBack(); c > 0 && rng.IntN(3) == 0 {
		var others []string
		for _, n := range nodes {
			if !slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind == LeaveUntilRevert && f.Node == n }) {
				others = append(others, n)
			}
		}
		if n := s.leaver(rng, others, c); n != "" && !s.Changes[c].Supersede {
			s.Faults = append(s.Faults, Fault{Kind: JoinDuringRevert, Trigger: Ended, Change: c - 1, Node: n})
			s.RevertGate = s.NodeLease + 500*time.Millisecond
		}
	}
	// Drawn after everything above, for the same reason: a node away past
	// the reaper's grace while the rollout that wrote it is active.
	if rng.IntN(5) == 0 {
		c := 1 + rng.IntN(len(s.Changes)-1)
		if n := s.leaver(rng, nodes, c); n != "" {
			s.Faults = append(s.Faults, Fault{Kind: AwayPastGrace, Trigger: AfterApply, Change: c, Node: n})
		}
	}
	// Drawn after everything above, for the same reason: agents of the
	// baseline release, and bake checks they cannot read (skew.go).
	if rng.IntN(skewOdds) == 0 {
		s.Skew = s.pickSkew(rng, nodes)
	}
	// Drawn after everything above, for the same reason: the store lost
	// at the end (one server only: a cluster's stores are not wiped).
	if rng.IntN(storeLossOdds) == 0 && !s.Cluster {
		s.StoreLoss = true
	}
	// Its own stream, for the same reason: a registry seed whose answers
	// the partial-registry fault leaves whole gets a mass deletion instead
	// (issue 47: the held and confirmed branches of the deletion rule).
	if s.Registry != nil && !slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind == PartialRegistry }) {
		s.Faults = append(s.Faults, s.pickHold())
	}
	// Its own stream, for the same reason: half the registry seeds confirm
	// a pending deletion (issue 47: the confirmed branch of a pending set).
	if s.Registry != nil {
		if f, ok := s.pickPendingConfirm(); ok {
			s.Faults = append(s.Faults, f)
		}
	}
	// Its own stream, for the same reason: every git registry's branch is
	// force-pushed to an older commit once (registry-rewind).
	if s.Registry != nil && s.Registry.Git {
		s.Faults = append(s.Faults, s.pickRewind())
	}
	s.pickExtras() // its own stream: no draw above moves
	s.applySkew()  // after pickExtras, which sees the strategies as drawn
	return s
}

// pickPauseAway draws a pause-away fault: after an apply (a node held in
// flight leaves while paused) or, in a third of them, when the last
// rollout ended (Node leaves, is reaped, and comes back while paused).
// After an apply the pause holds past the node's lease, so that its
// presence expires inside it; a reaped joiner's pause holds until it
// registered and Down (500 ms) more, time for a coordinator that ignores
// the freeze to configure it.
func (s Scenario) pickPauseAway(rng *rand.Rand, nodes []string) Fault {
	f := Fault{Kind: PauseAway, Trigger: AfterApply, Change: 1 + rng.IntN(len(s.Changes)-1),
		Delay: time.Duration(rng.IntN(300)) * time.Millisecond, Down: s.NodeLease + time.Second}
	if rng.IntN(3) == 0 {
		f.Trigger, f.Change, f.Delay, f.Down = Ended, len(s.Changes)-1, 0, 500*time.Millisecond
		f.Node = s.leaver(rng, nodes, f.Change)
	}
	return f
}

// rollsBack is the first change (after the baseline) whose failing nodes
// exceed its budget and that no next change supersedes; 0 if none.
func (s Scenario) rollsBack() int {
	for i := 1; i < len(s.Changes); i++ {
		c := s.Changes[i]
		budget := 0
		fmt.Sscan(c.Strategy.GetFailureBudget(), &budget)
		bad := 0
		for _, b := range c.Behaviour {
			if b != Healthy {
				bad++
			}
		}
		if bad > budget && (i+1 == len(s.Changes) || !s.Changes[i+1].Supersede) {
			return i
		}
	}
	return 0
}

// garbageBuckets are the buckets a garbage-value fault writes into: every
// sluice bucket.
var garbageBuckets = []string{contract.BucketIntents, contract.BucketRevisions, contract.BucketNodeConfigs,
	contract.BucketFingerprints, contract.BucketStatus, contract.BucketNodes, contract.BucketRollouts,
	contract.BucketLeases, contract.BucketControl, contract.BucketInstances, contract.BucketRegistries}

// pickGarbage draws a garbage-value fault: 3–8 writes, most into existing
// keys, the node configs (desired and backup keys) twice as often as any
// other bucket.
func (s Scenario) pickGarbage(rng *rand.Rand) Fault {
	f := Fault{Kind: GarbageValue, Change: 1 + rng.IntN(len(s.Changes)-1),
		Trigger: []TriggerKind{AfterApply, AfterApply, Reverting, Ended}[rng.IntN(4)],
		Delay:   time.Duration(rng.IntN(800)) * time.Millisecond}
	for range 3 + rng.IntN(6) {
		b := rng.IntN(len(garbageBuckets) + 1)
		g := GarbageWrite{Bucket: contract.BucketNodeConfigs, Fresh: rng.IntN(4) == 0, Pick: rng.Uint32() % 1000,
			Value: []Garbage{Foreign, Foreign, Truncated, Empty}[rng.IntN(4)], From: rng.IntN(len(garbageCandidates) + 1)}
		if b < len(garbageBuckets) {
			g.Bucket = garbageBuckets[b]
		}
		f.Garbage = append(f.Garbage, g)
	}
	return f
}

// pickTrickle draws a partial-registry fault over the scenario's registry.
func (s Scenario) pickTrickle(rng *rand.Rand) Fault {
	n := s.Registry.Intents
	t := &Trickle{Drop: []string{"some", "some", "all", "gone"}[rng.IntN(4)]}
	perm := rng.Perm(n)
	if t.Drop == "some" {
		perm = perm[:1+rng.IntN(n-1)]
	}
	t.Back = perm
	for range perm {
		t.Gaps = append(t.Gaps, time.Duration(100+rng.IntN(400))*time.Millisecond)
	}
	f := Fault{Kind: PartialRegistry, Change: 1 + rng.IntN(len(s.Changes)-1), Trigger: AfterApply,
		Delay: time.Duration(rng.IntN(800)) * time.Millisecond, Trickle: t}
	// Half of them refill slowly (issue 47), drawn from a source of their
	// own so that every other draw of the seed stays what it was.
	slow := rand.New(rand.NewPCG(s.Seed, 0x51ee7))
	if slow.IntN(2) == 0 {
		s.slowRefill(slow, t)
	}
	return f
}

// pickHold draws a registry-hold fault, from a source of its own: more
// files dropped than the hold share (half) lets be pending, two at least
// (2–3 of 3, 3–4 of 4, 3–5 of 5), for one and a half to two settle periods;
// three in four are confirmed.
func (s Scenario) pickHold() Fault {
	rng := rand.New(rand.NewPCG(s.Seed, 0x401d5))
	n := s.Registry.Intents
	least := max(2, n/2+1)
	h := &Hold{Drop: rng.Perm(n)[:least+rng.IntN(n-least+1)],
		For:     registrySettle*3/2 + time.Duration(rng.Int64N(int64(registrySettle/2))),
		Confirm: rng.IntN(4) != 0}
	slices.Sort(h.Drop)
	return Fault{Kind: RegistryHold, Change: 1 + rng.IntN(len(s.Changes)-1), Trigger: AfterApply,
		Delay: time.Duration(rng.IntN(800)) * time.Millisecond, Hold: h}
}

// pickPendingConfirm draws, in half the registry seeds, a
// registry-confirm-pending fault from a source of its own: one file up to
// the hold share (half, rounded down) dropped and confirmed, then another
// out for a third to two thirds of the settle period.
func (s Scenario) pickPendingConfirm() (Fault, bool) {
	rng := rand.New(rand.NewPCG(s.Seed, 0xc0f1))
	if rng.IntN(2) != 0 {
		return Fault{}, false
	}
	n := s.Registry.Intents
	perm := rng.Perm(n)
	k := 1 + rng.IntN(n/2)
	p := &PendingConfirm{Drop: perm[:k], Then: perm[k],
		For: registrySettle/3 + time.Duration(rng.Int64N(int64(registrySettle/3)))}
	slices.Sort(p.Drop)
	return Fault{Kind: RegistryConfirmPending, Change: 1 + rng.IntN(len(s.Changes)-1), Trigger: AfterApply,
		Delay: time.Duration(rng.IntN(800)) * time.Millisecond, Pending: p}, true
}

// slowRefill makes t a refill slower than the settle period: every dropped
// file back 2–4 s after the one before (a third to two thirds of the settle
// period; together longer), then as t's shape says. "some" drops as many
// files as the hold share lets be pending (half, rounded down, two at
// least), so the answers stay on the pending path.
func (s Scenario) slowRefill(rng *rand.Rand, t *Trickle) {
	n := s.Registry.Intents
	t.Shape = []string{"refill", "stall", "flap"}[rng.IntN(3)]
	t.Drop = []string{"some", "all", "gone"}[rng.IntN(3)]
	t.Back = rng.Perm(n)
	if t.Drop == "some" && n/2 >= 2 {
		t.Back = t.Back[:n/2]
	} else if t.Drop == "some" {
		t.Drop = "all" // one file dropped comes back in one gap: no refill
	}
	if t.Shape == "flap" {
		// Two files at least: the first back leaves again with the second,
		// and is the last back.
		t.Back = append(t.Back, t.Back[0])
	}
	// Each gap shorter than the settle period, together longer: k gaps of
	// at least 1.1/k of it (a third at least), at most two thirds of it
	// (nine tenths for two).
	k := time.Duration(len(t.Back))
	lo, hi := max(registrySettle/3, registrySettle*11/10/k), 2*registrySettle/3
	if k == 2 {
		hi = registrySettle * 9 / 10
	}
	t.Gaps = t.Gaps[:0]
	for range t.Back {
		t.Gaps = append(t.Gaps, lo+time.Duration(rng.Int64N(int64(hi-lo))))
	}
	if t.Shape == "stall" {
		// The answer stops growing for longer than the settle period, with
		// margin (a loaded machine's sync is late), before the last file.
		t.Gaps[len(t.Gaps)-1] = registrySettle + registrySettle/2 + time.Duration(rng.Int64N(int64(registrySettle/2)))
	}
}

func (s Scenario) pickChange(rng *rand.Rand, nodes []string, table uint32) Change {
	st := &sluicev1.Strategy{
		MaxParallel: strconv.Itoa(1 + rng.IntN(4)),
		// A leaving node must be skipped (its lease expires) before it
		// could time out, so deadlines are longer than the lease.
		ApplyDeadline:    durationpb.New(s.NodeLease + 1500*time.Millisecond),
		PickupDeadline:   durationpb.New(s.NodeLease + 1500*time.Millisecond),
		ProgressDeadline: durationpb.New(30 * time.Second),
	}
	if rng.IntN(2) == 0 {
		st.FirstWave = uint32(1 + rng.IntN(2))
		st.WaveGrowth = float64(2 + rng.IntN(2))
	}
	if rng.IntN(3) == 0 {
		st.FailureDomain = []string{"zone", "rack"}[rng.IntN(2)]
	}
	if (st.FirstWave > 0 || st.FailureDomain != "") && rng.IntN(2) == 0 { // bake applies between waves or domains
		st.BakeTime = durationpb.New(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
	budget := 0
	if rng.IntN(2) == 0 {
		budget = 1 + rng.IntN(2)
		st.FailureBudget = strconv.Itoa(budget)
	}
	c := Change{TableID: table + uint32(rng.IntN(50)), Strategy: st, Behaviour: map[string]Behaviour{}}
	// 0–3 nodes react badly.
	bad := rng.IntN(4)
	if rng.IntN(4) == 0 {
		bad = 0
	}
	for _, i := range rng.Perm(len(nodes))[:min(bad, len(nodes)-1)] {
		b := []Behaviour{FailCheck, FailCheck, FailApply, Hang}[rng.IntN(4)]
		if b == FailApply && c.TableID%2 == 0 {
			b = NodeDown // no draw of its own: every other pick of the seed stays as it was
		}
		c.Behaviour[nodes[i]] = b
	}
	return c
}

func (s Scenario) pickFaults(rng *rand.Rand, nodes []string) []Fault {
	n := 1 + rng.IntN(3)
	var fs []Fault
	for range n {
		change := 1 + rng.IntN(len(s.Changes)-1)
		f := Fault{Change: change, Trigger: AfterApply, Delay: time.Duration(rng.IntN(800)) * time.Millisecond}
		switch rng.IntN(14) {
		case 0, 1, 2:
			f.Kind = KillLeader
			f.Trigger = []TriggerKind{AfterApply, AfterApply, Reverting, Ended}[rng.IntN(4)]
			f.Down = time.Duration(rng.IntN(1500)) * time.Millisecond
		case 3:
			f.Kind = KillConfigurator
			f.Down = time.Duration(100+rng.IntN(500)) * time.Millisecond
		case 4, 5:
			f.Kind = KillAgent
			f.Trigger = Applying
			f.Node = nodes[rng.IntN(len(nodes))]
			f.Down = time.Duration(rng.IntN(int(s.NodeLease/2/time.Millisecond))) * time.Millisecond
		case 6, 7:
			f.Kind = AgentLeave
			f.Trigger = []TriggerKind{AfterApply, Reverting, Ended}[rng.IntN(3)]
			f.Node = s.leaver(rng, nodes, change)
			// Past the lease and the reaper's grace (= the lease).
			f.Down = 2*s.NodeLease + time.Duration(500+rng.IntN(1000))*time.Millisecond
		case 8, 11:
			f.Kind = RestartNATS
			f.Trigger = []TriggerKind{AfterApply, Reverting, Ended}[rng.IntN(3)]
			f.Down = time.Duration(100+rng.IntN(400)) * time.Millisecond
			if s.Cluster {
				f.Kind = KillServer
				f.Node = fmt.Sprintf("server-%d", rng.IntN(3))
				f.Down = time.Duration(200+rng.IntN(1500)) * time.Millisecond
			}
		case 10:
			// The leader's writes block and its clock stands still (SIGSTOP)
			// until the standby took over and wrote; then it wakes up.
			f.Kind = PausedLeader
			if !s.Standby {
				f.Kind, f.Down = KillLeader, time.Duration(rng.IntN(1500))*time.Millisecond
			}
		case 9:
			f.Kind = KillLeader
			f.Trigger = Ended
			f.Down = 0
		case 12, 13:
			// Transient KV errors: one component's link to the server breaks.
			f.Kind = []FaultKind{NetDrop, NetStall}[rng.IntN(2)]
			f.Trigger = []TriggerKind{AfterApply, AfterApply, Reverting, Ended}[rng.IntN(4)]
			f.Node = []string{"leader", "leader", configuratorC, reaperC, nodes[rng.IntN(len(nodes))]}[rng.IntN(5)]
			f.Down = time.Duration(200+rng.IntN(1800)) * time.Millisecond
			if s.Cluster { // the proxy is for one server; a cluster loses a server instead
				f.Kind, f.Node = KillServer, fmt.Sprintf("server-%d", rng.IntN(3))
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// leader picks a node that leaves during change: one the change does not
// make fail, so that the rollout's expected outcome stays what the failing
// nodes imply (a failing node that leaves is skipped instead).
func (s Scenario) leaver(rng *rand.Rand, nodes []string, change int) string {
	var ok []string
	for _, n := range nodes {
		if s.Changes[change].Behaviour[n] == Healthy {
			ok = append(ok, n)
		}
	}
	if len(ok) == 0 {
		return ""
	}
	return ok[rng.IntN(len(ok))]
}

// Describe is the scenario in a few lines, printed with every failure.
func (s Scenario) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, node lease %s, apply %s, standby coordinator %v, R3 cluster %v\n", s.Seed, s.Nodes, s.NodeLease, s.ApplyTime, s.Standby, s.Cluster)
	if len(s.Slow) > 0 {
		fmt.Fprintf(&b, "  slow: %v\n", s.Slow)
	}
	for i, c := range s.Changes {
		st := c.Strategy
		fmt.Fprintf(&b, "  change %d: table %d, maxParallel %s firstWave %d growth %g domain %q budget %q bake %s",
			i, c.TableID, st.GetMaxParallel(), st.GetFirstWave(), st.GetWaveGrowth(), st.GetFailureDomain(), st.GetFailureBudget(), st.GetBakeTime().AsDuration())
		if st.GetBakeChecks() > 0 {
			fmt.Fprintf(&b, " bakeChecks %d every %s skipIncompatible %v", st.GetBakeChecks(), st.GetBakeCheckInterval().AsDuration(), st.GetSkipIncompatible())
		}
		if c.Supersede {
			fmt.Fprintf(&b, ", applied while change %d runs after %s (whileActive %s)", i-1, c.After, c.Strategy.GetWhileActive())
		}
		if len(c.Behaviour) > 0 {
			fmt.Fprintf(&b, ", bad nodes %v", c.Behaviour)
		}
		b.WriteString("\n")
	}
	if s.RevertGate > 0 {
		fmt.Fprintf(&b, "  revert applies wait up to %s for the leave-until-revert node\n", s.RevertGate)
	}
	if s.Registry != nil {
		kind := "directory"
		switch {
		case s.Registry.Redis:
			kind = "redis (a directory on virtual time)"
		case s.Registry.Git:
			kind = "git"
		}
		fmt.Fprintf(&b, "  registry %s (%s): %d intents (reg-1 … reg-%d), settle period %s\n", registryName, kind, s.Registry.Intents, s.Registry.Intents, registrySettle)
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  fault: %s\n", f)
	}
	if s.Skew != nil {
		fmt.Fprintf(&b, "  version skew: %s\n", s.Skew)
	}
	if s.StoreLoss {
		fmt.Fprintf(&b, "  store-loss: at the end, the store is wiped while the agents keep their state; confirmed after a node lease, then the last change is applied again\n")
	}
	s.describeExtras(&b)
	return b.String()
}
