package rollout

import (
	"cmp"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// startRevert stops starting nodes and queues every node this rollout
// touched for its backup, written back with the same concurrency limit.
func (s *State) startRevert(now time.Time, reason string) {
	r := s.rollout
	s.endBake()
	s.reverting, s.stopReason, s.bakeUntil = true, reason, time.Time{}
	r.Phase, r.Reason, r.BakeUntil = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, reason, nil
	s.revertQ.clear()
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		if !n.touched || !n.present || n.rev != revNone {
			continue
		}
		switch n.prog {
		case progInFlight:
			s.land(n)
			s.setProg(n, progStopped)
		case progProvisioned, progFailed, progTimedOut:
		default:
			continue
		}
		s.queueRevert(n)
	}
	s.dropPending()
	s.changed()
	s.emit(s.rolloutEvent("RolloutReverting", fmt.Sprintf("%s; reverting %d touched node(s) to their backups, %d at a time",
		reason, s.revertQ.len(), s.plan.MaxParallel)))
}

// queueRevert queues n for its revert target, or fails its revert when the
// only target it has is known bad and the node never proved it (a backup it
// ran Provisioned is good here even if it failed elsewhere).
func (s *State) queueRevert(n *node) {
	backup, why := s.revertTarget(n)
	if backup == nil {
		s.revertFailed(n, why, needsOperator)
		return
	}
	if s.invalid[backup.GetFingerprint()] != nil && !backup.GetProven() {
		s.revertFailed(n, fmt.Sprintf("its revert target %s is recorded invalid; left on %s",
			render.Short(backup.GetFingerprint()), render.Short(n.desired.GetFingerprint())), needsOperator)
		return
	}
	n.previous = backup
	n.target, n.config = backup.GetFingerprint(), backup.GetConfig()
	if why == "" {
		delete(s.revertNotes, n)
	} else {
		s.revertNotes[n] = why
	}
	s.setRev(n, revQueued)
	s.revertQ.push(n)
}

// revertTarget is what a touched node goes back to: its backup; without one,
// the last applied revision's config for it (a revert never writes the empty
// config over a node that had one); the empty config only for a node that
// never had any, as far as anything stored and its agent say. nil, with why,
// when the node has no backup and the revision in force cannot be read, or
// its agent said it ran a config no stored value holds (n.before).
func (s *State) revertTarget(n *node) (*desired, string) {
	if n.previous != nil {
		return n.previous, ""
	}
	if s.lastAppliedRev != nil {
		fp, cfg := s.renderFor(s.lastAppliedRev, n)
		return &desired{revision: s.intern(s.lastApplied.GetRevision()), config: cfg, fingerprint: fp},
			fmt.Sprintf("it has no backup: reverted to the last applied revision %s instead", render.Short(s.lastApplied.GetRevision()))
	}
	if s.lastApplied.GetRevision() != "" {
		// A revision is in force, but it cannot be read (garbage over it):
		// its config for n cannot be rendered, and the empty config is no
		// revert of a node that had one.
		return nil, fmt.Sprintf("it has no backup, and the last applied revision %s cannot be read; left on %s",
			render.Short(s.lastApplied.GetRevision()), render.Short(n.desired.GetFingerprint()))
	}
	if b := n.before; b != nil && b.fingerprint == "" {
		return nil, fmt.Sprintf("it has no backup, and nothing stored says what it ran before this rollout (the store was lost and confirmed empty); "+
			"its agent names only this rollout's config %s, which it proved: the empty config is no revert of a node that may have run one: left on it, its agent's last-good",
			render.Short(cmp.Or(n.inForce().fingerprint, n.desired.GetFingerprint())))
	}
	if b := n.before; b != nil {
		// Nothing stored says it ran anything, but its agent said it did:
		// the store that held its backup was lost (pkg/storeloss) and an
		// operator confirmed starting from nothing. The empty config would
		// take from it what it ran (I10); its agent keeps its own last-good.
		return nil, fmt.Sprintf("it has no backup: it ran %s of revision %s before this rollout, as its agent said, and no stored revision holds that config "+
			"(the store was lost and confirmed empty); the empty config is no revert of it: left on %s, its agent's last-good",
			render.Short(b.fingerprint), render.Short(b.revision), render.Short(cmp.Or(n.inForce().fingerprint, n.desired.GetFingerprint())))
	}
	cfg := &sluicev1.NodeConfig{}
	return &desired{config: cfg, fingerprint: render.Fingerprint(cfg)},
		"it had no config before this rollout and nothing was ever applied: reverted to the empty config"
}

// fillRevert writes revert targets while slots are free.
func (s *State) fillRevert(now time.Time) {
	r := s.rollout
	for s.inFlight.len() < s.plan.MaxParallel && s.revertQ.len() > 0 {
		n := s.revertQ.pop()
		n.writtenAt, n.ackAt = time.Time{}, time.Time{} // the deadline starts when the write lands
		s.fly(n)
		s.setRev(n, revInFlight)
		d := *n.previous
		d.rollout, d.revert, d.proven, d.writtenAt, d.epoch = s.intern(r.GetId()), true, false, stamp{}, 0
		d.op, d.operation, d.deadline = opRevert, "", stampOfDuration(durationpb.New(contract.OperationDeadline(s.plan.ApplyDeadline)))
		n.desired = s.shareDesired(d)
		w := WriteDesired{Desired: d.message(n.name)}
		if why := s.revertNotes[n]; why != "" {
			w.Events = append(w.Events, s.nodeEvent(n, "NodeRevertTarget", why))
		}
		s.do(w)
	}
}

// reverted records that n's backup is in force again. Its NodeReverted
// event describes the agent's report, which is stored already, so it goes
// out at once, before the writes of this step: the last revert's step also
// writes the terminal record, and a leader stopped right after that write
// never announces what the record says happened (chaos seed 859).
func (s *State) reverted(n *node, msg string) {
	s.setRev(n, revDone)
	if !s.announcedReverted(n.name) {
		s.rollout.Reverted = append(s.rollout.Reverted, n.name)
		s.announced[n.name], s.announcedLen = true, len(s.rollout.Reverted)
		s.do(Emit{Event: s.nodeEvent(n, "NodeReverted", msg)})
	}
}

// announcedReverted reports whether the active rollout's record lists node
// as announced reverted, from a set kept beside the list (built from it
// once per rollout and term): a lookup in the list itself would cost every
// revert report the length of the list.
func (s *State) announcedReverted(node string) bool {
	r := s.rollout
	if s.announced == nil || s.announcedFor != r.GetId() || s.announcedLen != len(r.GetReverted()) {
		s.announcedFor, s.announcedLen = r.GetId(), len(r.GetReverted())
		s.announced = make(map[string]bool, len(r.GetReverted()))
		for _, name := range r.GetReverted() {
			s.announced[name] = true
		}
	}
	return s.announced[node]
}

// needsOperator is what a failed revert's event says to do.
const needsOperator = "the node needs an operator"

// revertFailed records that n's revert failed (msg: how), and emits
// NodeRevertFailed with msg and what to do (todo).
func (s *State) revertFailed(n *node, msg, todo string) {
	s.setRev(n, revFailed)
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED, "revert", "", msg)
	s.emit(s.nodeEvent(n, "NodeRevertFailed", msg+"; "+todo))
}

// forwardFailed is the node's Invalid report on rollout's forward target
// that the record may not hold (it failed while no leader ran, or after the
// last save): the status itself while the desired config is still the
// forward one (or it names this rollout: the node stopped before it took
// its revert), or else the last Invalid report the agent carries (its revert
// may already have overwritten the status). nil when it did not fail.
func forwardFailed(n *node, rollout string, d *desired, st *report) *failedReport {
	if n.forward == "" {
		return nil // not known (stopUnreadable): nothing can be said of it
	}
	if (!d.GetRevert() || st.GetRollout() == rollout) && st.GetFingerprint() == n.forward && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID {
		return &failedReport{check: st.GetFailedCheck(), output: st.GetCheckOutput(), message: st.GetMessage(), nodeFault: st.GetNodeFault()}
	}
	if li := st.GetLastInvalid(); li != nil && !li.GetRevert() && li.GetRollout() == rollout && li.GetFingerprint() == n.forward {
		return &failedReport{check: li.GetCheck(), output: li.GetOutput(), message: "reported Invalid while no leader ran; its revert was already written",
			nodeFault: li.GetNodeFault()}
	}
	return nil
}

// failedReport is what a node said about a config that failed on it;
// nodeFault is its node_fault (blamesConfig).
type failedReport struct{ check, output, message, nodeFault string }

// resumeRevert picks up a REVERTING rollout in a new term. Forward outcomes
// come from the record (a revert changes none of them); where each touched
// node stands in the revert is read off its desired config and status, and
// every node found reverted gets its NodeReverted event exactly once.
func (s *State) resumeRevert(now time.Time) {
	r := s.rollout
	s.pending.clear()
	s.inFlight.reset()
	s.revertQ.clear()
	s.reverting, s.stopReason = true, r.GetReason()
	s.clockBase, s.clockFrom, s.heldAt = r.GetLeaderTime().AsDuration(), now, time.Time{}
	c := countsOf(r.GetCounts())
	r.Counts = &sluicev1.RolloutCounts{Total: c.GetTotal(), Provisioned: c.GetProvisioned(), Failed: c.GetFailed(),
		TimedOut: c.GetTimedOut(), Skipped: c.GetSkipped(), Stopped: c.GetStopped(), NotStarted: c.GetNotStarted(), Attempted: c.GetAttempted(),
		Incompatible: c.GetIncompatible()}
	var err error
	if s.plan, err = resolve(r.GetStrategy(), int(c.GetTotal())); err != nil {
		s.plan = fallbackPlan()
	}
	s.gates = gateState{watched: s.gates.watched}
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		n.prog, n.rev, n.writtenAt, n.ackAt, n.touched = progNone, revNone, time.Time{}, time.Time{}, false
		d, st := n.desired, n.status
		if d.GetRollout() != r.GetId() {
			continue // untouched
		}
		n.touched = true
		n.previous = n.backup // as the term read it: the revert target
		n.before = s.ranBefore(n, r.GetId(), true)
		n.forward = s.forwardOf(n, d)
		// Its forward outcome: as the record has it; failed while no leader
		// ran; or stopped in flight (a later Invalid report still counts).
		switch prev := outcomeOf(r.GetFailures(), name); {
		case outcomeOf(r.GetSkipped(), name).GetResult() == sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE:
			n.prog = progIncompatible // its agent could not read it: the record's counts stand
		case prev.GetResult() == sluicev1.NodeResult_NODE_RESULT_INVALID && prev.GetFailedCheck() != "revert":
			n.prog = progFailed
		case prev.GetResult() == sluicev1.NodeResult_NODE_RESULT_TIMED_OUT:
			n.prog = progTimedOut
		case forwardFailed(n, r.GetId(), d, st) != nil:
			f := forwardFailed(n, r.GetId(), d, st)
			check := orDefault(f.check, "unknown check")
			if outcomeOf(r.GetSkipped(), name) != nil {
				// Skipped when its lease lapsed, and its report read only
				// now: it moves from skipped to failed.
				n.prog = progSkipped
				s.unlistSkipped(name)
			} else if r.Counts.GetStopped() > 0 {
				// It was in flight when the revert began (counted stopped
				// in the record) and failed since: it moves to failed.
				n.prog = progStopped
			}
			s.setProg(n, progFailed)
			s.recordOutcomeOf(n, n.forward, sluicev1.NodeResult_NODE_RESULT_INVALID, check, f.output, notRecorded(f.message, f.nodeFault))
			s.recordReported(n.name, n.forward, r.GetId(), r.GetRevision(), check, f.output, causeOf(check), f.nodeFault, now)
		case st.GetFingerprint() == n.forward && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
			n.prog = progProvisioned
		default:
			// Stopped in flight (the record counted it), or provisioned
			// and since reverted (counted provisioned): the record's
			// counts stand either way.
			n.prog = progStopped
		}
		if prev := revertOutcomeOf(r.GetFailures(), name); prev != nil {
			n.target = d.GetFingerprint()
			n.rev = revFailed
			r.Counts.RevertFailed++
			continue
		}
		if !d.GetRevert() {
			// Touched, not yet written back.
			if n.present {
				s.queueRevert(n)
			}
			continue
		}
		n.previous, n.target, n.config = d, d.GetFingerprint(), d.GetConfig()
		switch {
		case st.GetFingerprint() == d.GetFingerprint() && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
			s.reverted(n, fmt.Sprintf("backup %s is in force again (reported while no leader ran)", render.Short(n.target)))
		case st.GetFingerprint() == d.GetFingerprint() && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID:
			s.revertFailed(n, fmt.Sprintf("the agent could not put backup %s in force: %s",
				render.Short(n.target), checkFailed(orDefault(st.GetFailedCheck(), "unknown check"), st.GetMessage())), needsOperator)
		case n.present:
			// Written back before the restart: wait for it, with a fresh deadline.
			s.setRev(n, revInFlight)
			n.writtenAt = now
			if st.GetFingerprint() == d.GetFingerprint() && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
				n.ackAt = now
			}
			s.fly(n)
		}
	}
	s.changed()
}

// forwardOf is the active rollout's target for touched node n, whose
// desired config is d: rendered from the rollout's revision, or, when that
// revision cannot be read (stopUnreadable) or n's labels are unknown (a
// node absent since the term began, or takeUnseen), what the rollout wrote
// to n, if d is that forward write; "" when it is not known. Rendered for
// no labels, an absent node's target matched nothing it reported: its
// failure while no leader ran was left out of the record's failures.
// When d is already the revert, the forward write is gone: what the node
// reported of this rollout on a config other than the revert (the rollout
// writes a node nothing else) names it; an absent node whose revert was
// written before it left had its Invalid report left out (chaos seed 27).
func (s *State) forwardOf(n *node, d *desired) string {
	if s.rolloutRev != nil && n.labels != nil && !s.unseen[n.name] {
		fp, _ := s.renderFor(s.rolloutRev, n)
		return fp
	}
	if !d.GetRevert() {
		return d.GetFingerprint()
	}
	id, st := s.rollout.GetId(), n.status
	if li := st.GetLastInvalid(); li != nil && !li.GetRevert() && li.GetRollout() == id && li.GetFingerprint() != d.GetFingerprint() {
		return s.intern(li.GetFingerprint())
	}
	if st.GetRollout() == id && st.GetFingerprint() != "" && st.GetFingerprint() != d.GetFingerprint() {
		return st.GetFingerprint()
	}
	return ""
}

// stopUnreadable stops active rollout r, whose revision cannot be read
// (garbage over it) or is no longer stored: no node's target can be
// rendered, so it can be neither resumed nor left running. It is stopped as
// an abort that reverts (as a lost record is: LostRollout): every node whose
// desired config names it gets its backup back, maxParallel at a time (a
// backup is a whole config: no revision is needed to write it), and it
// ends ABORTED. Left as they were, the nodes it moved kept a target no
// record puts in force; the straggler pass that would move them back
// cannot render the config in force either when that revision is
// unreadable too (chaos seed 618). What its nodes reported of it stays on
// record (I3). A revert already under way finishes and ends as it would.
func (s *State) stopUnreadable(r *sluicev1.Rollout, now time.Time) {
	why := fmt.Sprintf("revision %s of this rollout cannot be read (unreadable or no longer stored): it can be neither resumed nor left running",
		render.Short(r.GetRevision()))
	resumed := r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
	if !resumed {
		if r.GetAbortedBy() == nil {
			r.AbortedBy = &sluicev1.AbortRequest{Rollout: r.GetId(), By: contract.ComponentCoordinator, At: timestamppb.New(now), Reason: why}
		}
		// Nodes in flight are stopped, pending ones never started: the
		// forward counts still add up to the total.
		c := countsOf(r.GetCounts())
		c.Stopped, c.NotStarted, c.InProgress, c.Pending = c.GetStopped()+c.GetInProgress(), c.GetNotStarted()+c.GetPending(), 0, 0
		r.Counts = c
		r.Phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
		r.Reason = fmt.Sprintf("aborted by %s: %s", contract.ComponentCoordinator, why)
	}
	s.rollout, s.rolloutRev = r, nil
	s.resumeRevert(now)
	if resumed { // an earlier term stopped it already
		s.emit(s.rolloutEvent("RolloutResumed", fmt.Sprintf("a leadership term resumes the revert (%s), its revision still unreadable: %d node(s) to revert",
			r.GetReason(), s.revertQ.len()+s.inFlight.len())))
	} else {
		s.emit(s.rolloutEvent("RolloutReverting", fmt.Sprintf("%s; reverting %d touched node(s) to their backups, %d at a time",
			r.GetReason(), s.revertQ.len()+s.inFlight.len(), s.plan.MaxParallel)))
	}
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		if !resumed && n.touched && n.prog == progStopped {
			// In flight at the stop (resumeRevert found it so): counted
			// stopped above, named with it.
			s.listStopped(name)
		}
		s.failedUnread(n)
	}
}

// failedUnread lists in the record the Invalid report on the forward
// target of active rollout r, stopped because its revision cannot be read
// (stopUnreadable), of a node r wrote whose desired key this term could
// not read: the node is not touched, no revert waits for it, and only its
// status says it was in the rollout. The report is what happened to it
// (I3), whether it stood at the stop or came after (its apply was still
// running then: chaos seed 1006). Listed once.
func (s *State) failedUnread(n *node) {
	r := s.rollout
	if r == nil || s.rolloutRev != nil || n.touched {
		return
	}
	st, id := n.status, r.GetId()
	fp, f := "", (*failedReport)(nil)
	li := st.GetLastInvalid()
	switch {
	case st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID && st.GetRollout() == id &&
		!(li.GetRevert() && li.GetFingerprint() == st.GetFingerprint()):
		fp, f = st.GetFingerprint(), &failedReport{check: st.GetFailedCheck(), output: st.GetCheckOutput(), message: "reported invalid: " + st.GetMessage(),
			nodeFault: st.GetNodeFault()}
	case li != nil && !li.GetRevert() && li.GetRollout() == id:
		fp, f = li.GetFingerprint(), &failedReport{check: li.GetCheck(), output: li.GetOutput(),
			message: "reported Invalid (carried by a later status: " + st.GetMessage() + ")", nodeFault: li.GetNodeFault()}
	default:
		return
	}
	if prev := outcomeOf(r.GetFailures(), n.name); prev != nil {
		if prev.GetResult() == sluicev1.NodeResult_NODE_RESULT_INVALID && prev.GetFingerprint() == fp {
			return // listed already
		}
	} else {
		s.countLateFailure()
	}
	check := orDefault(f.check, "unknown check")
	s.recordOutcomeOf(n, fp, sluicev1.NodeResult_NODE_RESULT_INVALID, check, f.output, notRecorded(f.message, f.nodeFault))
	ev := s.nodeEvent(n, "NodeFailed", "node reported Invalid on the target of the stopped rollout, whose write of it this term could not read: "+
		checkFailed(check, notRecorded(st.GetMessage(), f.nodeFault)))
	ev.Fingerprint = fp
	s.emit(ev)
}

// revertOutcomeOf finds node's revert failure in a record's failures.
func revertOutcomeOf(list []*sluicev1.NodeOutcome, node string) *sluicev1.NodeOutcome {
	for _, o := range list {
		if o.GetNode() == node && (o.GetResult() == sluicev1.NodeResult_NODE_RESULT_REVERT_FAILED || o.GetFailedCheck() == "revert") {
			return o
		}
	}
	return nil
}

// abortRequested takes an operator's request to abort the running rollout:
// it stops starting nodes and reverts every node it touched (or, with
// no_revert, ends once its in-flight nodes settled and leaves nodes as they
// are), then ends ABORTED. A request for a rollout that is not running, or
// one already acted on, changes nothing.
func (s *State) abortRequested(req *sluicev1.AbortRequest, now time.Time) {
	r := s.rollout
	if r == nil || req.GetRollout() != r.GetId() || r.GetAbortedBy() != nil {
		return
	}
	r.AbortedBy = proto.Clone(req).(*sluicev1.AbortRequest)
	s.changed()
	s.stopForAbort(now)
}

// stopForAbort stops the rollout its record's aborted_by names.
func (s *State) stopForAbort(now time.Time) {
	r := s.rollout
	req := r.GetAbortedBy()
	why := fmt.Sprintf("aborted by %s: %s", orDefault(req.GetBy(), "an operator"), orDefault(req.GetReason(), "no reason given"))
	switch {
	case s.reverting:
		// Already reverting: the revert finishes, and the rollout ends ABORTED.
		s.emit(s.rolloutEvent("RolloutAborting", why+"; the revert under way finishes first"))
	case req.GetNoRevert():
		if s.stopReason == "" {
			s.stopReason = why + "; touched nodes keep what they run"
		}
		s.dropPending()
		s.endBake()
		r.Reason = fmt.Sprintf("%s; waiting for %d in-flight node(s) to settle", s.stopReason, s.inFlight.len())
		s.changed()
		s.emit(s.rolloutEvent("RolloutAborting", fmt.Sprintf("%s; no more nodes start, nothing is reverted; it ends once %d in-flight node(s) settle",
			why, s.inFlight.len())))
	default:
		s.startRevert(now, why)
	}
}

// countLateFailure counts a failure the record did not list, keeping the
// forward counts equal to the total: the record counted the node in
// progress or pending — stopped or not started, once the rollout stopped
// (stopUnreadable) — if it counted it at all (a record that stands in for a
// lost one counts nothing).
func (s *State) countLateFailure() {
	c := s.rollout.Counts
	c.Failed++
	switch {
	case c.GetInProgress() > 0:
		c.InProgress--
	case c.GetStopped() > 0:
		c.Stopped--
	case c.GetPending() > 0:
		c.Pending--
	case c.GetNotStarted() > 0:
		c.NotStarted--
	default:
		c.Total++
	}
}

// countsOf is c, or empty counts when a record has none.
func countsOf(c *sluicev1.RolloutCounts) *sluicev1.RolloutCounts {
	if c == nil {
		return &sluicev1.RolloutCounts{}
	}
	return c
}
