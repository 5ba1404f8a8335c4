package rollout

// Presence: a node joining, coming back or leaving.

import (
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// presence takes a node's heartbeat lease being written or expiring.
func (s *State) presence(name string, p *sluicev1.NodePresence, now time.Time) {
	n := s.nodeOf(name)
	s.forgetUnseen(n)
	if p == nil { // lease expired: the node left
		s.setPresent(n, false)
		delete(s.unrenderable, n.name) // told again if it comes back
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
		s.leftBeforeFinishing(n, "node left (presence lease expired) before finishing")
		return
	}
	joined := !n.present
	s.setLabels(n, p.GetLabels())
	if s.setAgent(n, p) && n.prog == progIncompatible && !n.touched && !joined && s.rollout != nil && !s.reverting {
		// Its agent was upgraded in place (within its lease): it is in
		// the rollout again, as a node that comes back is.
		joined = true
	}
	ack := agentPauseOf(p.GetPause())
	s.setPresent(n, true)
	n.startedAt = stampOf(p.GetStartedAt())
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
	case n.prog == progNone || n.prog == progSkipped || n.prog == progIncompatible:
		if s.pause.GetPaused() && n.desired == nil {
			s.configureStraggler(n, "node joined while the control plane is paused (joiners last-good)")
		}
		if n.prog == progSkipped || n.prog == progIncompatible { // it came back: it is in the rollout again, no longer skipped
			s.setProg(n, progNone)
			s.rollout.Counts.Total--
			s.unlistSkipped(n.name)
		}
		s.place(n, nil, now)
		s.emit(s.nodeEvent(n, "NodeJoinedRollout", "node joined during the rollout; it gets the rollout target"))
	}
}

// leftBeforeFinishing skips n, pending or in flight, which left (why says
// how); a node with an outcome keeps it.
func (s *State) leftBeforeFinishing(n *node, why string) {
	switch n.prog {
	case progPending:
		s.pending.remove(n)
	case progInFlight:
		s.land(n)
	default:
		return
	}
	s.setProg(n, progSkipped)
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_SKIPPED, "", "", why)
	s.emit(s.nodeEvent(n, "NodeSkipped", why+"; not counted as a failure"))
}
