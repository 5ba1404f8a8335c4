package rollout

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Causes recorded with an invalid fingerprint.
const (
	CauseCheckFailed = "check-failed"
	CauseTimedOut    = "timed-out"
)

// statusChanged takes an agent's report.
func (s *State) statusChanged(st *sluicev1.NodeStatus, now time.Time) {
	n := s.nodeOf(st.GetNode())
	n.status = s.keepReport(st)
	phase := st.GetPhase()
	s.recordCarriedInvalid(n, now)
	if f := s.stoppedThenFailed(n, st); f != nil {
		// In flight when the rollout stopped, and failed after all: that is
		// what happened to it (I3), while its revert goes on. The report may
		// only be carried by a later status (its own write was overwritten).
		check := orDefault(f.check, "unknown check")
		s.setProg(n, progFailed)
		s.recordOutcomeOf(n, n.forward, sluicev1.NodeResult_NODE_RESULT_INVALID, check, f.output, f.message)
		ev := s.nodeEvent(n, "NodeFailed", "node reported Invalid after the rollout stopped: "+checkFailed(check, f.message))
		ev.Fingerprint = n.forward
		s.emit(ev)
	}
	if s.rollout == nil || !s.inFlight.has(n) || st.GetFingerprint() != n.target {
		// Not what the active rollout waits for. An Invalid report of a
		// rollout's config is still remembered (I4), e.g. a late report for
		// a rollout that was superseded or ended meanwhile.
		if phase == sluicev1.NodePhase_NODE_PHASE_INVALID && s.isRolloutTarget(n, st.GetRollout(), st.GetFingerprint()) {
			s.recordInvalid(n.name, st.GetFingerprint(), st.GetRollout(), st.GetRevision(),
				orDefault(st.GetFailedCheck(), "unknown check"), st.GetCheckOutput(), causeOf(st.GetFailedCheck()), now)
		}
		return
	}
	if phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
		if n.ackAt.IsZero() {
			n.ackAt = now
			s.reschedule(n)
		}
		return
	}
	if phase != sluicev1.NodePhase_NODE_PHASE_PROVISIONED && phase != sluicev1.NodePhase_NODE_PHASE_INVALID {
		return
	}
	s.land(n)
	if n.rev == revInFlight {
		if phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
			s.reverted(n, fmt.Sprintf("backup %s is in force again", render.Short(n.target)))
			return
		}
		s.revertFailed(n, fmt.Sprintf("the agent could not put backup %s in force: %s",
			render.Short(n.target), checkFailed(orDefault(st.GetFailedCheck(), "unknown check"), st.GetMessage())), needsOperator)
		return
	}
	if phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		s.setProg(n, progProvisioned)
		return
	}
	if st.GetFailedCheck() == contract.CheckDeadline {
		// Its agent stopped the operation at its deadline and restored last-good.
		s.timedOut(n, "its agent stopped the operation at its deadline: "+st.GetMessage(), st.GetCheckOutput(), now)
		return
	}
	// Invalid: the config failed on this node. Remember its fingerprint.
	s.setProg(n, progFailed)
	check := orDefault(st.GetFailedCheck(), "unknown check")
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, check, st.GetCheckOutput(), st.GetMessage())
	s.emit(s.nodeEvent(n, "NodeFailed", "node reported Invalid: "+checkFailed(check, st.GetMessage())))
	s.recordInvalid(n.name, n.target, s.rollout.GetId(), s.rollout.GetRevision(), check, st.GetCheckOutput(), CauseCheckFailed, now)
	s.overBudget(fmt.Sprintf("node %s: %s", n.name, checkFailed(check, st.GetMessage())), now)
}

// stoppedThenFailed is the Invalid report on its forward target of a node
// that was in flight when the active rollout stopped: st itself, or the
// report st carries; nil when there is none.
func (s *State) stoppedThenFailed(n *node, st *sluicev1.NodeStatus) *failedReport {
	if s.rollout == nil || !n.touched || n.prog != progStopped {
		return nil
	}
	id := s.rollout.GetId()
	if st.GetFingerprint() == n.forward && st.GetRollout() == id && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID {
		return &failedReport{check: st.GetFailedCheck(), output: st.GetCheckOutput(), message: st.GetMessage()}
	}
	if li := st.GetLastInvalid(); li != nil && !li.GetRevert() && li.GetRollout() == id && li.GetFingerprint() == n.forward {
		return &failedReport{check: li.GetCheck(), output: li.GetOutput(), message: "reported Invalid (carried by a later status: " + st.GetMessage() + ")"}
	}
	return nil
}

// isRolloutTarget reports whether a status of rollout on fingerprint fp
// reports on a config a rollout put on n as its target, rather than a
// revert to its backup.
func (s *State) isRolloutTarget(n *node, rollout, fp string) bool {
	if rollout == "" || fp == "" {
		return false
	}
	d := n.desired
	return !(d.GetRevert() && d.GetFingerprint() == fp)
}

// recordCarriedInvalid records the last Invalid report the agent carries in
// its status, if it was a rollout's target and is not recorded yet: the
// report itself may have been overwritten before any leader saw it.
func (s *State) recordCarriedInvalid(n *node, now time.Time) {
	li := n.status.GetLastInvalid()
	if li == nil || li.GetRevert() || li.GetRollout() == "" {
		return
	}
	if at, ok := s.forgiven[li.GetFingerprint()]; ok && !li.GetAt().AsTime().After(at) {
		return // an old report of a fingerprint retried on purpose since
	}
	s.recordInvalid(n.name, li.GetFingerprint(), li.GetRollout(), li.GetRevision(),
		orDefault(li.GetCheck(), "unknown check"), li.GetOutput(), causeOf(li.GetCheck()), now)
}

// recordInvalid remembers fp as known bad, once, with why.
func (s *State) recordInvalid(node, fp, rollout, revision, check, output, cause string, now time.Time) {
	if fp == "" || s.invalid[fp] != nil {
		return
	}
	f := &sluicev1.InvalidFingerprint{Fingerprint: fp, Revision: revision, Rollout: rollout, Node: node,
		Check: check, Output: truncate(output, maxOutput), Time: timestamppb.New(now), Cause: cause}
	s.invalid[fp] = f
	s.do(RecordInvalid{Fingerprint: cloneInvalid(f)})
	s.emit(&sluicev1.Event{
		Kind: contract.KindFingerprint, Id: fp, Type: "FingerprintInvalid", Fingerprint: fp, Node: node,
		Rollout: rollout, Revision: revision,
		Reason: fmt.Sprintf("%s on %s, %s: %s", cause, node, check, truncate(output, 200)),
	})
}

// overBudget stops and reverts once failures exceed the budget.
func (s *State) overBudget(what string, now time.Time) {
	if s.reverting || s.failures() <= s.plan.Budget {
		return
	}
	s.startRevert(now, fmt.Sprintf("%s; %d failure(s) exceed the failure budget of %d", what, s.failures(), s.plan.Budget))
}

// written starts the pickup deadline of a node whose desired config (or
// revert) write landed, if the rollout still waits for that config.
func (s *State) written(name, fp string, now time.Time) {
	if n := s.inFlight.get(name); n != nil && n.target == fp && n.writtenAt.IsZero() {
		n.writtenAt = now
		s.reschedule(n)
	}
}

// tick enforces deadlines and ends bake times.
func (s *State) tick(now time.Time) {
	if s.rollout == nil {
		return
	}
	if e := s.elapsed(now); e > s.plan.Progress {
		reason := fmt.Sprintf("progress deadline %s exceeded after %s under a leader", s.plan.Progress, e.Round(time.Second))
		if s.stopReason != "" {
			reason = s.stopReason + "; then " + reason
		}
		s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, reason+"; nodes are left as they are", now)
		return
	}
	s.gateDeadlines(now)
	// Only the nodes whose deadline passed are looked at, by name.
	for _, n := range s.overdue(now) {
		if !s.inFlight.has(n) || s.rollout == nil {
			continue // an earlier timeout stopped the rollout and took it out of flight
		}
		why := s.late(n, now)
		if why == "" {
			continue
		}
		s.land(n)
		if n.rev == revInFlight {
			// A revert is never cancelled: what it writes is the node's
			// backup, the config it should run however late its agent gets
			// to it (a status write held up by a stream's leader election
			// must not leave a healthy node on the rolled-back config: chaos
			// seed 82). The rollout stops waiting for it; the agent's own
			// deadline still bounds the operation.
			s.revertFailed(n, fmt.Sprintf("revert timed out: %s; it is not cancelled: its agent puts backup %s in force when it gets to it",
				why, render.Short(n.target)), "if it does not report it, the node needs an operator")
			continue
		}
		s.cancelOperation(n, why)
		s.timedOut(n, why, "", now)
	}
	s.changed() // leader time moved
}

// cancelOperation asks n's agent to stop the operation of its desired
// config, given up at its deadline: the same write, marked cancelled. The
// agent stops it if it runs it (and restores last-good), and never starts it.
func (s *State) cancelOperation(n *node, why string) {
	if n.desired == nil || n.desired.GetCancel() {
		return
	}
	d := *n.desired
	d.cancel, d.writtenAt, d.epoch = true, stamp{}, 0
	n.desired = &d
	s.do(WriteDesired{Desired: d.message(n.name), Events: []*sluicev1.Event{s.nodeEvent(n, "NodeOperationCancelled",
		fmt.Sprintf("operation %s cancelled: %s", d.operationOf(n.name), why))}})
}

// timedOut records that n's operation did not finish within its deadline:
// its agent stopped it (and restored last-good), or did not answer in time.
func (s *State) timedOut(n *node, why, output string, now time.Time) {
	s.recordTimedOut(n, why, output, true, now)
	s.overBudget(fmt.Sprintf("node %s timed out: %s", n.name, why), now)
}

// recordTimedOut counts n timed out, lists it in the record and records its
// target as invalid (cause timed-out); announce emits NodeTimedOut (not for
// an outcome an earlier term already announced, read back at a resume).
func (s *State) recordTimedOut(n *node, why, output string, announce bool, now time.Time) {
	s.setProg(n, progTimedOut)
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, contract.CheckDeadline, output, why)
	if announce {
		s.emit(s.nodeEvent(n, "NodeTimedOut", why))
	}
	s.recordInvalid(n.name, n.target, s.rollout.GetId(), s.rollout.GetRevision(), contract.CheckDeadline, why, CauseTimedOut, now)
}

// recordOutcome lists a node that did not simply succeed in the record.
func (s *State) recordOutcome(n *node, res sluicev1.NodeResult, check, output, msg string) {
	s.recordOutcomeOf(n, n.target, res, check, output, msg)
}

// recordOutcomeOf is recordOutcome for fingerprint fp.
func (s *State) recordOutcomeOf(n *node, fp string, res sluicev1.NodeResult, check, output, msg string) {
	o := &sluicev1.NodeOutcome{Node: n.name, Fingerprint: fp, Result: res,
		FailedCheck: check, Output: truncate(output, maxOutput), Message: msg}
	if n.status.GetFingerprint() == fp {
		// Only a phase reported for this config says anything about it (a
		// node skipped before it started still reports its previous one).
		o.Phase = n.status.GetPhase()
	}
	s.changed()
	r := s.rollout
	if res == sluicev1.NodeResult_NODE_RESULT_SKIPPED {
		for i, f := range r.Skipped {
			if f.GetNode() == n.name {
				r.Skipped[i] = o
				return
			}
		}
		if len(r.Skipped) < maxListed {
			r.Skipped = append(r.Skipped, o)
		}
		return
	}
	for i, f := range r.Failures {
		if f.GetNode() == n.name && (f.GetFailedCheck() == "revert") == (check == "revert") {
			r.Failures[i] = o // listed once per rollout step, with its latest outcome
			return
		}
	}
	if len(r.Failures) < maxListed {
		r.Failures = append(r.Failures, o)
	}
}

// presence takes a node's heartbeat lease being written or expiring.
func (s *State) presence(name string, p *sluicev1.NodePresence, now time.Time) {
	n := s.nodeOf(name)
	if p == nil { // lease expired: the node left
		n.present = false
		if s.rollout == nil {
			return
		}
		if n.rev == revQueued || n.rev == revInFlight {
			// It cannot be reverted while away; when it comes back it is.
			s.revertQ.remove(n)
			s.land(n)
			s.setRev(n, revNone)
			s.emit(s.nodeEvent(n, "NodeRevertDeferred", "node left (presence lease expired) before its revert finished; it is reverted when it comes back"))
			return
		}
		switch n.prog {
		case progPending:
			s.pending.remove(n)
		case progInFlight:
			s.land(n)
		default:
			return
		}
		s.setProg(n, progSkipped)
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_SKIPPED, "", "", "node left (presence lease expired) before finishing")
		s.emit(s.nodeEvent(n, "NodeSkipped", "node left (presence lease expired) before finishing; not counted as a failure"))
		return
	}
	joined := !n.present
	s.setLabels(n, p.GetLabels())
	ack := agentPauseOf(p.GetPause())
	n.present, n.startedAt = true, p.GetStartedAt().AsTime()
	if ack != n.pauseAck {
		n.pauseAck = ack
		s.reschedule(n) // whether its agent holds what is in flight there
	}
	if !joined {
		return
	}
	switch {
	case s.rollout == nil:
		s.configureStraggler(n, "node joined with no rollout running")
	case s.reverting && n.touched && n.rev == revNone && n.prog != progRefused:
		// It left after this rollout touched it: put its backup back.
		s.queueRevert(n)
		s.emit(s.nodeEvent(n, "NodeJoinedRevert", "node came back while the rollout reverts; it is reverted to its backup"))
	case s.reverting:
		if n.rev == revNone && n.prog == progNone {
			s.configureStraggler(n, "node joined while the rollout reverts")
		}
	case n.prog == progNone || n.prog == progSkipped:
		if s.pause.GetPaused() && n.desired == nil {
			s.configureStraggler(n, "node joined while the control plane is paused (joiners last-good)")
		}
		if n.prog == progSkipped { // it came back: it is in the rollout again, no longer skipped
			s.setProg(n, progNone)
			s.rollout.Counts.Total--
			s.rollout.Skipped = slices.DeleteFunc(s.rollout.Skipped, func(o *sluicev1.NodeOutcome) bool { return o.GetNode() == n.name })
		}
		s.place(n, nil, now)
		s.emit(s.nodeEvent(n, "NodeJoinedRollout", "node joined during the rollout; it gets the rollout target"))
	}
}

// causeOf is the cause recorded for a failure reported with check: a node
// operation its agent stopped at the deadline timed out; anything else failed.
func causeOf(check string) string {
	if check == contract.CheckDeadline {
		return CauseTimedOut
	}
	return CauseCheckFailed
}
