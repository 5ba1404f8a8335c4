package rollout

// Deadlines: a landed write starts a node's pickup deadline, and each tick
// times out the nodes past theirs (and ends bake times).

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

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
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, contract.FailedCheckDeadline, output, why)
	if announce {
		s.emit(s.nodeEvent(n, "NodeTimedOut", why))
	}
	s.recordInvalid(n.name, n.target, s.rollout.GetId(), s.rollout.GetRevision(), contract.FailedCheckDeadline, why, CauseTimedOut, now)
}
