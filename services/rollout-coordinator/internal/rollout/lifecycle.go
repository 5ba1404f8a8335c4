package rollout

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// load takes the whole stored state at the start of a term and acts on the
// difference: it resumes a running rollout, finishes the bookkeeping of one
// that ended, and starts the head's rollout only if none was ever started
// for its generation — so a restart, reconnect or takeover never runs a
// rollout twice.
func (s *State) load(ev Loaded, now time.Time) {
	*s = *NewState()
	s.invalidExpiry, s.storeConfirmed = ev.InvalidExpiry, ev.StoreConfirmed
	s.pause = clonePause(ev.Pause)
	for _, f := range ev.Freezes {
		s.freezeChanged(f.GetId(), f)
	}
	for _, r := range ev.RolloutPauses {
		s.rolloutPause[r.GetRollout()] = clonePause(r)
	}
	s.lastApplied, s.lastAppliedRev = ev.LastApplied, ev.LastAppliedRev
	s.startedGen = ev.LastApplied.GetGeneration()
	for _, f := range ev.Invalid {
		if fg := f.GetForgiven(); fg != nil {
			s.forgiven[f.GetFingerprint()] = fg.GetAt().AsTime()
			continue
		}
		s.invalid[f.GetFingerprint()] = f
	}
	// Only what decisions read of each value is kept (facts.go): taken in
	// by the loop as it read them (Intake), or given here.
	if in := ev.Intake; in != nil && in.s != nil {
		s.nodes, s.labelSets, s.configs, s.strs = in.s.nodes, in.s.labelSets, in.s.configs, in.s.strs
		s.agents, s.reports, s.desireds = in.s.agents, in.s.reports, in.s.desireds
		in.s = nil // its nodes are this state's now
	}
	for _, p := range ev.Presence {
		s.takePresence(p)
	}
	for _, st := range ev.Status {
		s.takeStatus(st)
	}
	for _, d := range ev.Desired {
		s.takeDesired(d)
	}
	for _, b := range ev.Backups {
		s.takeBackup(b)
	}
	active, activeRev := ev.Active, ev.ActiveRev
	if l := ev.ActiveLost; active == nil && l != nil {
		active = lostRecord(l, ev.Head, now)
	}
	if hr := ev.HeadRollout; hr != nil {
		s.startedGen = max(s.startedGen, hr.GetGeneration())
		if active == nil && contract.Active(hr.GetPhase()) {
			// The previous leader stopped between creating the record and
			// pointing rollouts/active at it.
			active, activeRev = hr, ev.HeadRev
		}
	}
	if ev.HeadRolloutLost != "" && ev.HeadRollout == nil {
		// Its record exists, so the head's rollout was started: it is never
		// run again. It cannot be resumed either (what it did is unknown):
		// it is taken as ended, and the next head rolls out.
		s.startedGen = max(s.startedGen, ev.Head.GetGeneration())
	}
	if active != nil {
		s.startedGen = max(s.startedGen, active.GetGeneration())
		s.takeUnseen(ev.PresenceUnreadable, active.GetId())
	}
	switch {
	case active == nil:
	case contract.Terminal(active.GetPhase()):
		// The previous leader stopped after writing the terminal record:
		// finish the bookkeeping, never rewrite the record.
		fin := FinishRollout{ClearActive: active.GetId()}
		if contract.InForce(active.GetPhase()) && s.lastApplied.GetGeneration() < active.GetGeneration() {
			s.lastApplied = refOf(active, active.GetFinishedAt())
			s.lastAppliedRev = activeRev
			fin.LastApplied = proto.Clone(s.lastApplied).(*sluicev1.RolloutRef)
		}
		s.do(fin)
	case activeRev == nil:
		// Its revision cannot be read (garbage over it), or is gone.
		s.stopUnreadable(active, now)
	default:
		// Resume: where each node stands is read off its desired config and
		// status. Deadlines restart now: time without a leader does not count.
		gone := s.adopt(active, activeRev, now)
		if s.rollout != nil {
			s.leftUnled = gone
			why := fmt.Sprintf("leadership term %d resumes the rollout in phase %s: %s",
				ev.Term, phaseWord(s.rollout.GetPhase()), s.progressLine()) + s.bakeNote(now)
			if gone > 0 {
				why += fmt.Sprintf("; %d node(s) the previous term counted left while no coordinator led (presence lease lapsed) and are no longer counted: they get the config in force when they return", gone)
			}
			s.emit(s.rolloutEvent("RolloutResumed", why))
		}
	}
	// Operators' requests: each acts once (a forgiven fingerprint, an
	// aborted rollout's record say it was done), before anything starts.
	for _, f := range ev.Forgives {
		s.forgiveRequested(f, now)
	}
	for _, a := range ev.Aborts {
		s.abortRequested(a, now)
	}
	s.head, s.headRev = ev.Head, ev.HeadRev
	s.storeLost = ev.StoreLost
	s.headMoved(ev.Head, ev.HeadRev, now)
	s.recordReportedInvalid(now)
	s.configureStragglers()
}

// takeUnseen takes as present every node in unreadable (its presence key
// holds garbage) whose desired config names active rollout id: the rollout
// wrote it, so it is counted, waited for and reverted like any node it
// wrote, with the target it was written (its labels, needed to render one,
// are unknown). Dropped as gone, a node still applying the target was
// counted nowhere, and the rollout could succeed while it failed there
// (chaos seed 874), or end its revert without waiting for one written
// (seed 1157). A node the rollout never wrote is left out until its
// presence can be read, as one whose lease lapsed.
func (s *State) takeUnseen(unreadable []string, id string) {
	for _, name := range unreadable {
		n := s.nodes[name]
		if n == nil || n.present || n.desired == nil || n.desired.GetRollout() != id {
			continue
		}
		n.present = true
		if s.unseen == nil {
			s.unseen = map[string]bool{}
		}
		s.unseen[n.name] = true
	}
}

// forgetUnseen ends what takeUnseen assumed: n's presence was read (or
// lapsed), or, for every such node, the rollout ended (nothing is rendered
// for labels unknown: a node still unseen is taken as absent, and
// configured when its presence is read).
func (s *State) forgetUnseen(n *node) {
	if n != nil {
		delete(s.unseen, n.name)
		return
	}
	for name := range s.unseen {
		s.nodes[name].present = false
	}
	s.unseen = nil
}

// lostRecord stands in for the record of the active rollout that cannot be
// read: the rollout rollouts/active names, stopped as an operator's abort
// stops one. Resumed from it, the term reverts every node whose desired
// config names the rollout (adopt, stopForAbort) and writes the terminal
// record over the unreadable one: a rollout whose record is lost can be
// neither resumed nor left running. Its strategy is the head's when the
// head is that rollout's, else the defaults (it only paces the revert);
// so is its source.
func lostRecord(l *LostRollout, head *sluicev1.Head, now time.Time) *sluicev1.Rollout {
	r := &sluicev1.Rollout{Id: l.Ref.GetRollout(), Revision: l.Ref.GetRevision(), Generation: l.Ref.GetGeneration(),
		Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, StartedAt: l.Ref.GetAt(), LeaderEpoch: l.Ref.GetLeaderEpoch(),
		AbortedBy: &sluicev1.AbortRequest{Rollout: l.Ref.GetRollout(), By: contract.ComponentCoordinator, At: timestamppb.New(now),
			Reason: fmt.Sprintf("its record cannot be read (%s): it can be neither resumed nor left running", l.Why)}}
	if head.GetGeneration() == l.Ref.GetGeneration() && head.GetRevision() == l.Ref.GetRevision() {
		r.Strategy, r.Source = head.GetStrategy(), head.GetSource()
	}
	return r
}

// recordReportedInvalid remembers every rollout target a node reports
// Invalid that the invalid set does not hold yet (I4): a report that came
// while no leader ran, e.g. for a rollout superseded meanwhile.
func (s *State) recordReportedInvalid(now time.Time) {
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		st := n.status
		if st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID && s.isRolloutTarget(n, st.GetRollout(), st.GetFingerprint()) {
			s.recordReported(n.name, st.GetFingerprint(), st.GetRollout(), st.GetRevision(),
				orDefault(st.GetFailedCheck(), "unknown check"), st.GetCheckOutput(), causeOf(st.GetFailedCheck()), st.GetNodeFault(), now)
		}
		s.recordCarriedInvalid(n, now)
	}
}

func refOf(r *sluicev1.Rollout, at *timestamppb.Timestamp) *sluicev1.RolloutRef {
	return &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration(), At: at}
}

func (s *State) progressLine() string {
	c := s.rollout.GetCounts()
	return fmt.Sprintf("%d nodes: %d provisioned, %d in progress, %d pending, %d failed, %d timed out, %d reverted, %d reverting",
		c.GetTotal(), c.GetProvisioned(), c.GetInProgress(), c.GetPending(), c.GetFailed(), c.GetTimedOut(), c.GetReverted(), c.GetReverting())
}

// headMoved starts a rollout of the head unless one was already started for
// its generation (running, or ended in any way). While another rollout runs
// the head waits for it (queue), or stops it first (supersede).
func (s *State) headMoved(h *sluicev1.Head, rev *sluicev1.Revision, now time.Time) {
	if h == nil || rev == nil {
		return
	}
	s.head, s.headRev = h, rev
	if s.lastAppliedRev == nil && s.lastApplied.GetRevision() == rev.GetId() {
		// The revision in force could not be read when this term loaded
		// (garbage over it); the configurator rewrote it and the head. Until
		// now no node's config in force could be rendered: a node that came
		// back meanwhile waits for it (chaos seed 143).
		s.lastAppliedRev, s.unrenderable = rev, nil
		s.configureStragglers()
	}
	if h.GetGeneration() <= s.startedGen {
		return
	}
	if s.rollout != nil {
		s.wait(h, rev)
		return
	}
	if s.storeLost != "" {
		s.holdForLoss(h)
		return
	}
	s.start(h, rev, now)
}

// wait holds h until the running rollout ends. A head that supersedes stops
// the running rollout: it starts no more nodes and ends Aborted once the
// nodes in flight have reported or timed out, so that no outcome of theirs
// is lost; a revert already under way finishes first.
func (s *State) wait(h *sluicev1.Head, rev *sluicev1.Revision) {
	s.next, s.nextRev = h, rev
	r := s.rollout
	id := contract.RolloutID(h.GetGeneration(), h.GetRevision())
	queued := &sluicev1.Event{Kind: contract.KindRollout, Id: id, Type: "RolloutQueued", Rollout: id, Revision: h.GetRevision()}
	if !contract.Supersedes(h.GetStrategy()) {
		queued.Reason = fmt.Sprintf("generation %d (revision %s) starts when rollout %s ends (whileActive %s)",
			h.GetGeneration(), render.Short(h.GetRevision()), r.GetId(), contract.WhileActiveQueue)
		s.emit(queued)
		return
	}
	if s.reverting || s.stopReason != "" {
		queued.Reason = fmt.Sprintf("generation %d (revision %s) starts when rollout %s has stopped (%s)",
			h.GetGeneration(), render.Short(h.GetRevision()), r.GetId(), s.stopReason)
		s.emit(queued)
		return
	}
	s.stopReason = fmt.Sprintf("superseded by generation %d (revision %s)", h.GetGeneration(), render.Short(h.GetRevision()))
	s.dropPending()
	s.endBake()
	r.Reason = fmt.Sprintf("%s; waiting for %d in-flight node(s) to settle", s.stopReason, s.inFlight.len())
	s.changed()
	s.emit(s.rolloutEvent("RolloutSuperseding", fmt.Sprintf("%s (whileActive %s): no more nodes start; it ends once %d in-flight node(s) settle",
		s.stopReason, contract.WhileActiveSupersede, s.inFlight.len())))
}

// start starts the rollout of head h.
func (s *State) start(h *sluicev1.Head, rev *sluicev1.Revision, now time.Time) {
	s.startedGen = h.GetGeneration()
	r := &sluicev1.Rollout{
		Id:               contract.RolloutID(h.GetGeneration(), h.GetRevision()),
		Revision:         h.GetRevision(),
		PreviousRevision: s.lastApplied.GetRevision(),
		Generation:       h.GetGeneration(),
		Strategy:         h.GetStrategy(),
		Phase:            sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Reason:           "head moved: " + h.GetReason(),
		StartedAt:        timestamppb.New(now),
		Counts:           &sluicev1.RolloutCounts{},
		Source:           h.GetSource(), // the registry and git commit the head came from
	}
	s.rollout, s.rolloutRev = r, rev
	s.placeAll(false, now)
	s.do(StartRollout{Rollout: snapshot(r)})
	from := ""
	if line := contract.SourceLine(r.GetSource()); line != "" {
		from = "; from " + line
	}
	s.emit(s.rolloutEvent("RolloutStarted", fmt.Sprintf("%s%s; %d nodes, %d already up to date; %s",
		r.GetReason(), from, r.GetCounts().GetTotal(), r.GetCounts().GetProvisioned(), s.plan.Describe())))
	s.refuseKnownBad(now)
	s.refuseIncompatible()
}

// adopt resumes r, read back from its record: the backups the term read
// are the revert targets of touched nodes. It returns how many nodes the
// record counted that are no longer counted: a node the rollout never
// wrote to leaves no trace of having been in it but the record's total, so
// one whose lease lapsed while no coordinator led cannot be named (a node
// the rollout wrote to, or recorded skipped, is still counted and named).
func (s *State) adopt(r *sluicev1.Rollout, rev *sluicev1.Revision, now time.Time) (gone int) {
	s.rollout, s.rolloutRev = r, rev
	if r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
		s.resumeRevert(now)
		return 0
	}
	before := r.GetCounts().GetTotal()
	s.placeAll(true, now)
	gone = max(0, int(before)-int(r.GetCounts().GetTotal()))
	if r.GetAbortedBy() != nil {
		s.stopForAbort(now) // aborted by an operator in an earlier term
		return gone
	}
	if s.failures() > s.plan.Budget {
		s.startRevert(now, fmt.Sprintf("%d node(s) failed while no leader ran, over the failure budget of %d (first: %s)",
			s.failures(), s.plan.Budget, describeFailure(r.GetFailures())))
		return gone
	}
	s.refuseKnownBad(now)
	if s.started == 0 {
		// No node was written yet: the rule of the start holds, as if this
		// term had started it. A leader stopped between storing the start
		// and the refusal (they are two writes) left a record that the next
		// term would otherwise roll out, skipping the nodes it was to be
		// refused for (chaos seed 148).
		s.refuseIncompatible()
	}
	return gone
}
