// The types the decider and the loop share: events, actions, State and
// Decide. The package's contract is in doc.go.

package rollout

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Events.
type (
	// Event is something that happened: the loop turns watched changes into events.
	Event interface{ isEvent() }

	// Loaded is the whole owned state, read at the start of a leadership term.
	Loaded struct {
		Head           *sluicev1.Head
		HeadRev        *sluicev1.Revision
		HeadRollout    *sluicev1.Rollout // the record of the head's rollout id, if one exists
		LastApplied    *sluicev1.RolloutRef
		LastAppliedRev *sluicev1.Revision
		Active         *sluicev1.Rollout // the record rollouts/active points at
		ActiveRev      *sluicev1.Revision
		// HeadRolloutLost says why the record of the head's rollout id,
		// which exists, cannot be read ("" when it can, or does not exist;
		// HeadRollout is then nil).
		HeadRolloutLost string
		// ActiveLost: rollouts/active names a rollout whose record cannot
		// be read (Active is then nil; ActiveRev is the ref's revision).
		ActiveLost *LostRollout
		Presence   []*sluicev1.NodePresence
		// PresenceUnreadable names the nodes whose presence key holds a
		// value that does not decode (garbage over it, quarantined): their
		// agent is there as far as anyone can tell (a lapsed lease leaves
		// no key), their labels are unknown.
		PresenceUnreadable []string
		Status             []*sluicev1.NodeStatus
		Desired            []*sluicev1.DesiredConfig
		Backups            []*sluicev1.DesiredConfig
		Invalid            []*sluicev1.InvalidFingerprint // forgiven ones included
		Aborts             []*sluicev1.AbortRequest       // operators' requests in the control bucket
		Forgives           []*sluicev1.ForgiveRequest
		Pause              *sluicev1.PauseRequest   // control/pause, nil when never paused
		RolloutPauses      []*sluicev1.PauseRequest // control/pause.<rollout>, Rollout set from the key
		Freezes            []*sluicev1.Freeze       // control/freeze.<id>, Id set from the key
		Term               uint64                   // the leadership term (lease epoch), for the RolloutResumed event
		// InvalidExpiry, when positive, forgives a fingerprint recorded
		// invalid that long ago (Config.InvalidExpiry; off by default).
		InvalidExpiry time.Duration
		// Intake holds the nodes' values taken in as the loop read them
		// (NewIntake), besides or instead of Presence, Status, Desired and
		// Backups. Decide takes its nodes over: it is spent after.
		Intake *Intake
		// StoreLost says the store is lost (pkg/storeloss, as the loop
		// read it: "the store is empty but N nodes run configs of
		// revision X"), "" when it is not: no rollout starts (storeloss.go).
		StoreLost string
		// StoreConfirmed: an operator's confirmation of a lost store
		// (control/store.confirm) is stored: the store began empty while
		// nodes ran configs it does not hold (storeloss.go, ranBefore).
		StoreConfirmed bool
	}
	// HeadMoved: the configurator moved revisions/head. StoreLost as in
	// Loaded, read with the head.
	HeadMoved struct {
		Head      *sluicev1.Head
		Rev       *sluicev1.Revision
		StoreLost string
	}
	// StoreLossChanged: an operator confirmed a lost store
	// (control/store.confirm); Lost is the rule's answer read since.
	StoreLossChanged struct{ Lost string }
	// Presence: a node's presence was written (P set) or expired (P nil).
	Presence struct {
		Node string
		P    *sluicev1.NodePresence
	}
	// Status: a node's agent wrote its status.
	Status struct{ S *sluicev1.NodeStatus }
	// Reaped: the reaper deleted a departed node's keys (its status last).
	Reaped struct{ Node string }
	// Tick: time passed; deadlines and bake times are checked. With
	// Recheck set (the loop's timer), the in-flight nodes past a deadline
	// have their statuses read again first (ReadStatuses) and the whole
	// tick waits for them (Rechecked); without, the state is all there is.
	Tick struct{ Recheck bool }
	// Rechecked: the loop read again the statuses ReadStatuses asked for;
	// Statuses holds those newer than the watch delivered (none when the
	// reads failed or found nothing). The deadlines are checked after them.
	Rechecked struct{ Statuses []*sluicev1.NodeStatus }
	// DesiredListed: the loop listed the nodeconfigs bucket's keys (the
	// verify interval); the listing began at Started.
	DesiredListed struct {
		Keys    map[string]bool
		Started time.Time
	}
	// DesiredRead answers a ReadDesired: whether Node's desired key is
	// gone, as the stream's leader says, with the presence (P) that
	// waited for the read. A read that failed, or that the loop skipped
	// (a write of its own in flight), is not Gone.
	DesiredRead struct {
		Node string
		P    *sluicev1.NodePresence
		Gone bool
	}
	// Written: the loop's write of Node's desired config with Fingerprint
	// landed; the node's pickup deadline starts now.
	Written struct{ Node, Fingerprint string }
	// AbortRequested: an operator asked to abort a rollout (control/abort.<id>).
	AbortRequested struct{ R *sluicev1.AbortRequest }
	// ForgiveRequested: an operator asked to forgive a fingerprint (control/forgive.<fp>).
	ForgiveRequested struct{ R *sluicev1.ForgiveRequest }
	// PauseChanged: an operator paused or resumed the control plane
	// (control/pause; R nil when the key was deleted).
	PauseChanged struct{ R *sluicev1.PauseRequest }
	// RolloutPauseChanged: an operator paused or resumed one rollout
	// (control/pause.<rollout>; R.Rollout set from the key).
	RolloutPauseChanged struct{ R *sluicev1.PauseRequest }
	// FreezeChanged: an operator added (F set) or removed (F nil) the freeze
	// control/freeze.<ID>.
	FreezeChanged struct {
		ID string
		F  *sluicev1.Freeze
	}
	// GateMeasured: what the loop measured for a gate WatchGates asked for
	// (Before as asked; "" for an alert gate). Err says why there is no
	// measurement (Prometheus did not answer); otherwise Samples counts the
	// query's values over the lookback, Max and Min are the highest and
	// lowest of them, and Firing names the gate's alerts that fire.
	GateMeasured struct {
		Rollout, Gate, Before string
		Err                   string
		Samples               int
		Max, Min              float64
		Firing                []string
	}
)

func (Loaded) isEvent()              {}
func (HeadMoved) isEvent()           {}
func (Presence) isEvent()            {}
func (Status) isEvent()              {}
func (Reaped) isEvent()              {}
func (Tick) isEvent()                {}
func (Rechecked) isEvent()           {}
func (DesiredListed) isEvent()       {}
func (DesiredRead) isEvent()         {}
func (Written) isEvent()             {}
func (AbortRequested) isEvent()      {}
func (ForgiveRequested) isEvent()    {}
func (PauseChanged) isEvent()        {}
func (RolloutPauseChanged) isEvent() {}
func (FreezeChanged) isEvent()       {}
func (GateMeasured) isEvent()        {}
func (StoreLossChanged) isEvent()    {}

// Actions. Each carries copies, never pointers into the state.
type (
	// Action is an effect for the loop to perform.
	Action interface{ isAction() }

	// WriteDesired writes a node's desired config and, when Backup is set,
	// first saves Backup (the config it replaces) as the node's backup. A
	// revert writes the backup back and leaves the backup key alone. Events
	// are emitted once the write landed.
	WriteDesired struct {
		Desired *sluicev1.DesiredConfig
		Backup  *sluicev1.DesiredConfig
		Events  []*sluicev1.Event
	}
	// StartRollout creates the rollout record and points rollouts/active at it.
	StartRollout struct{ Rollout *sluicev1.Rollout }
	// SaveRollout writes the running rollout's record. Flush asks for the
	// write before the actions that follow (the events describing it);
	// otherwise the loop may coalesce saves.
	SaveRollout struct {
		Rollout *sluicev1.Rollout
		Flush   bool
	}
	// FinishRollout ends a rollout: it writes the terminal record (Rollout;
	// nil when it was written before, as a terminal record is never written
	// again), moves rollouts/last-applied (LastApplied; nil leaves it) and
	// clears rollouts/active if it still names ClearActive.
	FinishRollout struct {
		Rollout     *sluicev1.Rollout
		LastApplied *sluicev1.RolloutRef
		ClearActive string
	}
	// RecordInvalid records a fingerprint as known bad, with why.
	RecordInvalid struct{ Fingerprint *sluicev1.InvalidFingerprint }
	// ForgiveInvalid rewrites a recorded fingerprint with who forgave it,
	// when and why: it stays for the audit and refuses nothing any more.
	ForgiveInvalid struct{ Fingerprint *sluicev1.InvalidFingerprint }
	// AckPause announces the control-plane pause generation this
	// coordinator has reached (its instance presence).
	AckPause struct{ Ack *sluicev1.PauseAck }
	// Emit records a state transition in the events stream.
	Emit struct{ Event *sluicev1.Event }
	// WatchGates is every gate measurement the rollout needs now: the loop
	// measures each (again, with backoff, until it is no longer listed) and
	// feeds the results back as GateMeasured; what is not listed stops.
	WatchGates struct {
		Rollout string
		Checks  []GateCheck
	}
	// ReadStatuses reads again the statuses of Nodes, which a deadline
	// would time out, and answers with Rechecked (always: the deadlines
	// wait for it).
	ReadStatuses struct{ Nodes []string }
	// ReadDesired reads Node's desired key from the nodeconfigs stream's
	// leader, for Why, and answers with DesiredRead when the key is gone or
	// a presence (P) waits for the read. Nothing is read while a write of
	// the loop's own to the key is in flight, or landed since Listed (the
	// listing that missed it began then; zero: no listing): that write is
	// the truth to come.
	ReadDesired struct {
		Node   string
		Why    string
		P      *sluicev1.NodePresence
		Listed time.Time
	}
)

// GateCheck is one gate to measure: a metric gate for the boundary Before,
// or an alert gate (Before "").
type GateCheck struct {
	Gate   contract.Gate
	Before string
}

func (WriteDesired) isAction()   {}
func (StartRollout) isAction()   {}
func (SaveRollout) isAction()    {}
func (FinishRollout) isAction()  {}
func (RecordInvalid) isAction()  {}
func (ForgiveInvalid) isAction() {}
func (AckPause) isAction()       {}
func (Emit) isAction()           {}
func (WatchGates) isAction()     {}
func (ReadStatuses) isAction()   {}
func (ReadDesired) isAction()    {}

// maxListed bounds the failures, skipped and stopped nodes kept in a
// rollout record (its counts say how many in all).
const maxListed = 100

// maxOutput bounds a check's output kept in records.
const maxOutput = 2048

// Decide applies ev to s at time now and returns what to do, in order: the
// writes, then the running rollout's record, then the events describing them.
func Decide(s *State, ev Event, now time.Time) []Action {
	s.out, s.events, s.dirty = nil, nil, false
	quiet := s.quietBeat(ev)
	switch ev := ev.(type) {
	case Loaded:
		s.load(ev, now)
	case HeadMoved:
		s.storeLost = ev.StoreLost
		s.headMoved(ev.Head, ev.Rev, now)
	case Presence:
		if s.returning(ev.Node, ev.P) {
			s.do(ReadDesired{Node: ev.Node, Why: whyReturning, P: ev.P})
			break // taken with the answer (DesiredRead)
		}
		s.presence(ev.Node, ev.P, now)
	case Status:
		s.statusChanged(ev.S, now)
	case Reaped:
		s.reaped(ev.Node, now)
	case Tick:
		if ev.Recheck && s.recheckTick(now) {
			break // the deadlines are checked with the answer (Rechecked)
		}
		s.expireInvalid(now)
		s.tick(now)
	case Rechecked:
		s.rechecked(ev, now)
	case DesiredListed:
		s.desiredListed(ev)
	case DesiredRead:
		s.desiredRead(ev, now)
	case Written:
		s.written(ev.Node, ev.Fingerprint, now)
	case AbortRequested:
		s.abortRequested(ev.R, now)
	case ForgiveRequested:
		s.forgiveRequested(ev.R, now)
	case PauseChanged:
		s.pauseChanged(ev.R, now)
	case RolloutPauseChanged:
		s.rolloutPauseChanged(ev.R)
	case FreezeChanged:
		s.freezeChanged(ev.ID, ev.F)
	case GateMeasured:
		s.gateMeasured(ev, now)
	case StoreLossChanged:
		s.storeLossChanged(ev.Lost, now)
	}
	// A rollout that ends starts the head waiting for it, which may start
	// nodes, or end at once (nothing to change): until nothing moves.
	s.settle(now)
	if !quiet || len(s.out) > 0 || len(s.events) > 0 || s.dirty {
		// The nodes in flight, their progress or the pauses may have
		// changed: busy works its answer out again, if it is asked. A
		// heartbeat that changed nothing keeps it (no node started or
		// ended: that queues an action or changes the record).
		s.busyKnown = [2]bool{}
	}
	s.syncGates()
	s.syncPause(now)
	acts := s.out
	if s.rollout != nil {
		s.rollout.LeaderTime = durationpb.New(s.elapsed(now))
		if s.dirty {
			acts = append(acts, SaveRollout{Rollout: snapshot(s.rollout), Flush: len(s.events) > 0})
		}
	}
	for _, e := range s.events {
		// An event's time is when the transition was decided, not when its
		// publish got through: a write decided in the same step may land
		// before or after it, and a late publish must not move the moment a
		// node was freed or a bake began.
		if e.Time == nil {
			e.Time = timestamppb.New(now)
		}
		acts = append(acts, Emit{Event: e})
	}
	s.out, s.events = nil, nil
	return acts
}

// settleRounds bounds settle. One event ends at most the running rollout
// and the head queued behind it, which may end at once (nothing to change)
// and leave the record with no rollout: three rounds move, the fourth
// finds nothing moving. More would mean a rollout that keeps ending and
// starting on its own, a bug.
var settleRounds = 4

// settle fills and finishes until the rollout in progress stays the same.
// A chain that has not settled within settleRounds is reported as an
// event (DecisionUnsettled, with the rollout it stopped at), never left
// silent; the next event continues it.
func (s *State) settle(now time.Time) {
	for range settleRounds {
		before := s.rollout
		s.syncBake(now) // a pause begun or lifted holds or restarts the bake (bake.go)
		s.fill(now)
		s.maybeFinish(now)
		if s.rollout == before {
			return
		}
	}
	s.emit(s.rolloutEvent("DecisionUnsettled", fmt.Sprintf(
		"rollouts still starting or ending after %d rounds of one decision; the next event continues (a bug: please report it)", settleRounds)))
}

// do queues an action; emit queues an event, emitted after every write of this step.
func (s *State) do(a Action)            { s.out = append(s.out, a) }
func (s *State) emit(e *sluicev1.Event) { s.events = append(s.events, e) }
func (s *State) changed()               { s.dirty = true }

// snapshot copies r for an action, on every step that changed it. What
// grows with the fleet is shared rather than copied: the list of reverted
// nodes (the state only appends to it, and the copy's capacity ends at its
// length, so what the state appends later is never part of the copy) and
// the ended stages (one per wave or failure domain; closeStage changes only
// the open one, the last, which is copied).
func snapshot(r *sluicev1.Rollout) *sluicev1.Rollout {
	reverted, stages := r.Reverted, r.Stages
	r.Reverted, r.Stages = nil, nil
	c := proto.Clone(r).(*sluicev1.Rollout)
	r.Reverted, r.Stages = reverted, stages
	c.Reverted = reverted[:len(reverted):len(reverted)]
	if n := len(stages); n > 0 {
		c.Stages = append(stages[:n-1:n-1], proto.Clone(stages[n-1]).(*sluicev1.StageResult))
	}
	return c
}

// LostRollout is the active rollout whose record cannot be read: what
// rollouts/active says of it, and why the record is unusable.
type LostRollout struct {
	Ref *sluicev1.RolloutRef
	Why string
}
