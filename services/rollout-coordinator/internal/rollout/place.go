package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// placeAll places every present node in the rollout, recounting from
// scratch. Resuming (the term's load), each node's backup, as read, is its
// revert target; a new rollout has none yet.
func (s *State) placeAll(resuming bool, now time.Time) {
	r := s.rollout
	s.pending.clear()
	s.inFlight.reset()
	s.forgetGroups()
	s.started, s.domainSet, s.waitingWindow = 0, false, false
	if resuming {
		s.takeBake(now)
	} else {
		s.endBake()
	}
	s.revertQ.clear()
	s.reverting, s.stopReason = false, ""
	s.clockBase, s.clockFrom, s.heldAt = r.GetLeaderTime().AsDuration(), now, time.Time{}
	prevFailures, prevSkipped := r.GetFailures(), r.GetSkipped()
	r.Counts = &sluicev1.RolloutCounts{}
	r.Failures, r.Skipped = nil, nil
	var err error
	if s.plan, err = resolve(r.GetStrategy(), s.countPresent()); err != nil {
		// The configurator validates strategies; a bad one here is stored
		// state from elsewhere. Go one node at a time rather than not at all.
		s.plan = fallbackPlan()
	}
	s.initGates(now)
	s.evidenceReset()
	// A waiting line the last term wrote is this term's to clear: as a
	// gate's, or else as a window's or freeze's (the next wave start that
	// finds it open clears it).
	if w := r.GetWaiting(); w != "" {
		s.gates.waiting = strings.HasPrefix(w, contract.GateWaitPrefix)
		s.waitingWindow = !s.gates.waiting
	}
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		n.prog, n.rev, n.previous, n.writtenAt, n.ackAt, n.touched = progNone, revNone, nil, time.Time{}, time.Time{}, false
		n.before = nil
		switch {
		case n.present:
			if resuming {
				n.previous, n.before = n.backup, s.ranBefore(n, r.GetId(), true)
			}
			s.place(n, prevOutcome(prevFailures, prevSkipped, name), now)
		case outcomeOf(prevSkipped, name) != nil:
			// Left during an earlier term and not back: still skipped
			// (also a node that left while pending, whose desired config
			// is still the previous rollout's).
			n.touched = true
			r.Counts.Total++
			if o := outcomeOf(prevSkipped, name); o.GetResult() == sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
				s.skipIncompatible(n, o.GetOutput(), o.GetMessage(), false)
				break
			}
			s.setProg(n, progSkipped)
			s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_SKIPPED, "", "", outcomeOf(prevSkipped, name).GetMessage())
		case resuming && n.desired.GetRollout() == r.GetId() && !n.desired.GetRevert():
			// Written by this rollout in an earlier term, and gone since
			// while no coordinator led (its lease lapsed unseen).
			n.previous, n.before = n.backup, s.ranBefore(n, r.GetId(), true)
			s.placeAway(n, prevOutcome(prevFailures, prevSkipped, name), now)
		}
	}
	if resuming {
		s.unbakedAfterTakeover()
	}
	s.changed()
}

func (s *State) countPresent() int {
	c := 0
	for _, n := range s.nodes {
		if n.present {
			c++
		}
	}
	return c
}

// prevOutcome is node's outcome in the record a term resumes from: its
// failure, or else its skip when its agent could not read its target.
func prevOutcome(failures, skipped []*sluicev1.NodeOutcome, node string) *sluicev1.NodeOutcome {
	if o := outcomeOf(failures, node); o != nil {
		return o
	}
	if o := outcomeOf(skipped, node); o.GetResult() == sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
		return o
	}
	return nil
}

func outcomeOf(list []*sluicev1.NodeOutcome, node string) *sluicev1.NodeOutcome {
	for _, o := range list {
		if o.GetNode() == node {
			return o
		}
	}
	return nil
}

// place renders the rollout target for n and puts it where its desired
// config, status and earlier outcome (prev, from the record) say it is. A
// node whose labels are unknown — absent (placeAway) or taken as present on
// the rollout's write alone (takeUnseen) — has for its target the one it was
// written: there is nothing to render it by.
func (s *State) place(n *node, prev *sluicev1.NodeOutcome, now time.Time) {
	if !n.present || s.unseen[n.name] {
		s.placeAt(n, n.desired.GetFingerprint(), n.desired.GetConfig(), prev, now)
		return
	}
	target, config := s.renderFor(s.rolloutRev, n)
	s.placeAt(n, target, config, prev, now)
}

// placeAway places n, which this rollout wrote to in an earlier term and
// which is not present now, as the live path would have had it seen the
// node leave (presence.go): its target is what was written to it (place),
// an outcome its status shows stands, and a node still in flight left
// before finishing and is skipped. It counts as
// started in its stage, so the bake after that stage still comes (chaos
// seed 184: a new term that forgot such a node started the next failure
// domain without the bake).
func (s *State) placeAway(n *node, prev *sluicev1.NodeOutcome, now time.Time) {
	s.place(n, prev, now)
	if n.prog == progInFlight {
		s.leftBeforeFinishing(n, "node left (presence lease expired) while no coordinator led, before finishing")
	}
}

// placeAt puts n, whose rollout target is target, where its desired config,
// status and earlier outcome (prev, from the record) say it is.
func (s *State) placeAt(n *node, target string, config *sluicev1.NodeConfig, prev *sluicev1.NodeOutcome, now time.Time) {
	r := s.rollout
	n.target, n.config = target, config
	n.forward = n.target
	n.domain = s.domainOf(r.GetStrategy().GetFailureDomain(), n)
	s.joinGroup(n)
	r.Counts.Total++
	st, d := n.status, n.desired
	// A desired key that cannot be read (garbage over it) or is gone: the
	// status may still show that this rollout gave n its target.
	lost := d == nil && s.reportsTarget(n, st)
	ours := d.GetRollout() == r.GetId() && d.GetFingerprint() == n.target && !d.GetRevert() || lost
	switch {
	case ours && prev.GetResult() == sluicev1.NodeResult_NODE_RESULT_TIMED_OUT && prev.GetFingerprint() == n.target:
		// Timed out in an earlier term: that outcome stands.
		s.touchedAgain(n)
		s.setProg(n, progTimedOut)
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, prev.GetFailedCheck(), prev.GetOutput(), prev.GetMessage())
	case ours && d.GetCancel() && !(st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED):
		// Cancelled at its deadline in an earlier term whose record was not saved.
		s.touchedAgain(n)
		s.recordTimedOut(n, "its operation "+d.operationOf(n.name)+" was cancelled at its deadline in an earlier term", "", false, now)
	case st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && (d.GetFingerprint() == n.target || lost):
		if d.GetRollout() == r.GetId() || lost {
			s.touchedAgain(n)
		}
		s.setProg(n, progProvisioned)
	case ours && st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID &&
		st.GetFailedCheck() == contract.FailedCheckDeadline:
		// Its agent stopped it at its deadline while no leader ran.
		s.touchedAgain(n)
		s.recordTimedOut(n, "its agent stopped the operation at its deadline: "+st.GetMessage(), st.GetCheckOutput(), false, now)
	case ours && st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID:
		// Failed while no leader ran: its outcome, its fingerprint (I4, unless
		// a node fault: blamesConfig), and the budget are taken into account now.
		s.touchedAgain(n)
		s.setProg(n, progFailed)
		check := orDefault(st.GetFailedCheck(), "unknown check")
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, check, st.GetCheckOutput(), notRecorded(st.GetMessage(), st.GetNodeFault()))
		s.recordReported(n.name, n.target, r.GetId(), r.GetRevision(), check, st.GetCheckOutput(), CauseCheckFailed, st.GetNodeFault(), now)

	case ours && st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE:
		// Its agent cannot read it (reported while no leader ran, or
		// skipped by an earlier term): skipped, never a failure.
		s.touchedAgain(n)
		s.skipIncompatible(n, st.GetCheckOutput(), st.GetMessage(), prev.GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE)
	case d.GetRollout() == r.GetId() && carriesFailure(st.GetLastInvalid(), r.GetId(), n.target):
		// This rollout wrote n (its revert, here), and n's agent carries an
		// Invalid report of the target in its status: a failure whose
		// record was lost with the rollout's (LostRollout; chaos seed 184).
		s.touchedAgain(n)
		s.setProg(n, progFailed)
		li := st.GetLastInvalid()
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, orDefault(li.GetCheck(), "unknown check"), li.GetOutput(),
			notRecorded("reported Invalid (carried by a later status: "+st.GetMessage()+")", li.GetNodeFault()))
	case ours:
		// Written before a restart: wait for it, with a fresh deadline.
		s.touchedAgain(n)
		s.setProg(n, progInFlight)
		n.writtenAt = now
		if st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
			n.ackAt = now
		}
		s.fly(n)
	default:
		s.setProg(n, progPending)
		s.pending.push(n)
	}
}

// reportsTarget reports whether status st shows that the active rollout
// gave n its target: its agent reports on that config under the rollout's
// id. It is the evidence of a write the state cannot see (its desired key
// unreadable or gone). Writing the target again would wait for a pickup
// that never comes: an agent does not run again an operation it reported on
// (chaos seed 139: a node that reported Invalid was timed out too).
func (s *State) reportsTarget(n *node, st reportOn) bool {
	r := s.rollout
	if r == nil || n.target == "" || st.GetRollout() != r.GetId() || st.GetFingerprint() != n.target {
		return false
	}
	switch st.GetPhase() {
	case sluicev1.NodePhase_NODE_PHASE_PROVISIONING, sluicev1.NodePhase_NODE_PHASE_PROVISIONED, sluicev1.NodePhase_NODE_PHASE_INVALID,
		sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE:
		return true
	}
	return false
}

// carriesFailure reports whether li, the last Invalid report a status
// carries, is of the forward target fp of rollout id.
func carriesFailure(li *sluicev1.InvalidReport, id, fp string) bool {
	return li != nil && !li.GetRevert() && li.GetRollout() == id && li.GetFingerprint() == fp && fp != ""
}

// reportOn is what reportsTarget reads of a status: a stored status or
// the report the state keeps of one.
type reportOn interface {
	GetPhase() sluicev1.NodePhase
	GetFingerprint() string
	GetRollout() string
}

// startedUnseen takes pending node n into flight when its status shows the
// rollout already gave it its target (reportsTarget), so that the status
// is its progress: an earlier term's write the state could not read. Only
// while the rollout goes forward; a stopped rollout starts nothing.
func (s *State) startedUnseen(n *node, st *sluicev1.NodeStatus, now time.Time) {
	if n.prog != progPending || s.reverting || s.stopReason != "" || !s.reportsTarget(n, st) {
		return
	}
	s.pending.remove(n)
	s.touchedAgain(n)
	s.setProg(n, progInFlight)
	n.writtenAt, n.ackAt = now, time.Time{}
	s.fly(n)
	s.emit(s.nodeEvent(n, "NodeFoundStarted", fmt.Sprintf(
		"its status reports on %s under this rollout, whose write of it this term could not read: its reports count, it is not written again",
		render.Short(n.target))))
}

// touchedAgain marks a node this rollout wrote in an earlier term; it counts
// towards the waves already started.
func (s *State) touchedAgain(n *node) {
	n.touched = true
	s.started++
	s.rollout.Counts.Attempted++
}
