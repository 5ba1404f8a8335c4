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
	if f := s.lateFailure(n, st); f != nil {
		s.failedLate(n, f, now)
	}
	s.startedUnseen(n, st, now)
	s.failedUnread(n)
	if s.bakeReport(n, st, now) {
		return // a re-run of its checks failed while it baked (bakechecks.go)
	}
	if s.rollout == nil || !s.inFlight.has(n) || st.GetFingerprint() != n.target {
		// Not what the active rollout waits for. An Invalid report of a
		// rollout's config is still remembered (I4), e.g. a late report for
		// a rollout that was superseded or ended meanwhile.
		if phase == sluicev1.NodePhase_NODE_PHASE_INVALID && s.isRolloutTarget(n, st.GetRollout(), st.GetFingerprint()) {
			s.recordReported(n.name, st.GetFingerprint(), st.GetRollout(), st.GetRevision(),
				orDefault(st.GetFailedCheck(), "unknown check"), st.GetCheckOutput(), causeOf(st.GetFailedCheck()), st.GetNodeFault(), now)
		}
		return
	}
	if phase == sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE {
		s.incompatibleReported(n, st)
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
	if st.GetFailedCheck() == contract.FailedCheckDeadline {
		// Its agent stopped the operation at its deadline and restored last-good.
		s.timedOut(n, "its agent stopped the operation at its deadline: "+st.GetMessage(), st.GetCheckOutput(), now)
		return
	}
	// Invalid: the config failed on this node (remember its fingerprint),
	// or the node could not apply it (a failure all the same, for the
	// budget and the revert, but the config is not blamed).
	s.setProg(n, progFailed)
	check := orDefault(st.GetFailedCheck(), "unknown check")
	msg := notRecorded(st.GetMessage(), st.GetNodeFault())
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, check, st.GetCheckOutput(), msg)
	s.emit(s.nodeEvent(n, "NodeFailed", "node reported Invalid: "+checkFailed(check, msg)))
	s.recordReported(n.name, n.target, s.rollout.GetId(), s.rollout.GetRevision(), check, st.GetCheckOutput(), CauseCheckFailed, st.GetNodeFault(), now)
	s.overBudget(fmt.Sprintf("node %s: %s", n.name, checkFailed(check, msg)), now)
}

// lateFailure is the Invalid report on its forward target of a node the
// active rollout no longer waits for: in flight when the rollout stopped
// (progStopped), or skipped when its lease lapsed before its report was
// read (progSkipped: the agent wrote it and stopped; chaos seed 136). st
// itself, or the report st carries; nil when there is none.
func (s *State) lateFailure(n *node, st *sluicev1.NodeStatus) *failedReport {
	if s.rollout == nil || !n.touched || (n.prog != progStopped && n.prog != progSkipped) || n.forward == "" {
		return nil
	}
	id := s.rollout.GetId()
	if st.GetFingerprint() == n.forward && st.GetRollout() == id && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID {
		return &failedReport{check: st.GetFailedCheck(), output: st.GetCheckOutput(), message: st.GetMessage(), nodeFault: st.GetNodeFault()}
	}
	if li := st.GetLastInvalid(); li != nil && !li.GetRevert() && li.GetRollout() == id && li.GetFingerprint() == n.forward {
		return &failedReport{check: li.GetCheck(), output: li.GetOutput(), message: "reported Invalid (carried by a later status: " + st.GetMessage() + ")",
			nodeFault: li.GetNodeFault()}
	}
	return nil
}

// failedLate records f, n's late Invalid report on its forward target
// (lateFailure), as what happened to it (I3): it moves from stopped or
// skipped to failed, and counts against the budget of a rollout still
// going forward. Its revert, if any, goes on.
func (s *State) failedLate(n *node, f *failedReport, now time.Time) {
	check := orDefault(f.check, "unknown check")
	msg := notRecorded(f.message, f.nodeFault)
	when := "after the rollout stopped"
	if n.prog == progSkipped {
		when = "after it was skipped (its lease lapsed first)"
		s.unlistSkipped(n.name)
	}
	s.setProg(n, progFailed)
	s.recordOutcomeOf(n, n.forward, sluicev1.NodeResult_NODE_RESULT_INVALID, check, f.output, msg)
	ev := s.nodeEvent(n, "NodeFailed", "node reported Invalid "+when+": "+checkFailed(check, msg))
	ev.Fingerprint = n.forward
	s.emit(ev)
	s.overBudget(fmt.Sprintf("node %s: %s", n.name, checkFailed(check, msg)), now)
}

// unlistSkipped takes node off the active rollout's skipped list: it came
// back, or a late report says it failed.
func (s *State) unlistSkipped(node string) {
	s.rollout.Skipped = slices.DeleteFunc(s.rollout.Skipped, func(o *sluicev1.NodeOutcome) bool { return o.GetNode() == node })
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
	s.recordReported(n.name, li.GetFingerprint(), li.GetRollout(), li.GetRevision(),
		orDefault(li.GetCheck(), "unknown check"), li.GetOutput(), causeOf(li.GetCheck()), li.GetNodeFault(), now)
}

// blamesConfig is invariant I9's rule for a node's Invalid report: the
// config failed there and its fingerprint is recorded invalid, unless the
// report is a node fault (NodeStatus.node_fault, InvalidReport.node_fault):
// its agent found, before anything on the node changed, that the node
// could apply no config at all (its FRR not running, not installed or not
// answering). A node fault still fails the node (the budget counts it, the
// rollout stops and reverts as for any failure); only the fingerprint is
// spared. Every site that records a fingerprint from a report asks here,
// through recordReported; notRecorded says so in the node's outcome.
func blamesConfig(nodeFault string) bool { return nodeFault == "" }

// recordReported records fp invalid for a node's Invalid report, unless
// the node, not the config, was at fault (blamesConfig).
func (s *State) recordReported(node, fp, rollout, revision, check, output, cause, nodeFault string, now time.Time) {
	if !blamesConfig(nodeFault) {
		return
	}
	s.recordInvalid(node, fp, rollout, revision, check, output, cause, now)
}

// notRecorded is the outcome message of an Invalid report whose agent said
// msg: for a node fault, that the fingerprint is not recorded and why.
func notRecorded(msg, nodeFault string) string {
	if blamesConfig(nodeFault) {
		return msg
	}
	return "not recorded invalid: the node could not apply it (" + nodeFault + ")"
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
	if res == sluicev1.NodeResult_NODE_RESULT_SKIPPED || res == sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
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

// causeOf is the cause recorded for a failure reported with check: a node
// operation its agent stopped at the deadline timed out; anything else failed.
func causeOf(check string) string {
	if check == contract.FailedCheckDeadline {
		return CauseTimedOut
	}
	return CauseCheckFailed
}
