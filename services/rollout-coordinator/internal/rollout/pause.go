package rollout

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Pause: the whole control plane's (control/pause) and one rollout's
// (control/pause.<rollout>). While either holds the active rollout, no node
// operation starts — neither a forward write nor a revert — while those in
// flight finish. The coordinator acknowledges a pause once none it started
// is still running (contract.NextAck): for the control plane's pause in
// its instance presence (AckPause), for a rollout's in the rollout record.
//
// Deadlines: the progress deadline does not count while held, and under
// the control plane's pause a node whose write landed but whose (paused)
// agent has not picked it up is not late: its pickup deadline starts again
// at resume. Nodes that join while the control plane is paused get nothing
// (joiners "freeze") or, if they were never configured, the last applied
// revision (joiners "last-good").

// pauseChanged takes the control plane's pause request (nil: none).
func (s *State) pauseChanged(r *sluicev1.PauseRequest, now time.Time) {
	if r.GetGeneration() < s.pause.GetGeneration() {
		return // read late; a newer one is in force
	}
	was := s.pause.GetPaused()
	held := map[string]bool{}
	for name, n := range s.inFlight.all() {
		if s.heldAtAgent(n) {
			held[name] = true
		}
	}
	s.pause = clonePause(r)
	if was && !r.GetPaused() {
		s.resumePickups(held, now)
	}
	// Every deadline in flight depends on the pause (an operator's
	// request: once per request, not per event).
	s.rescheduleAll()
	if was && !r.GetPaused() {
		s.configureStragglers() // nodes frozen while paused get the revision in force
	}
	if !was && r.GetPaused() {
		s.configureStragglers() // under "last-good", joiners already present
	}
}

// rolloutPauseChanged takes an operator's pause or resume of one rollout.
func (s *State) rolloutPauseChanged(r *sluicev1.PauseRequest) {
	id := r.GetRollout()
	if cur := s.rolloutPause[id]; r.GetGeneration() < cur.GetGeneration() {
		return
	}
	s.rolloutPause[id] = clonePause(r)
}

// holding reports whether the active rollout starts no node operation now.
func (s *State) holding() bool {
	return s.pause.GetPaused() || s.rolloutPause[s.rollout.GetId()].GetPaused()
}

// joinerWaits reports whether n, joining now, is left alone: the control
// plane is paused, and its joiners policy gives n nothing (freeze, or n was
// configured before and keeps what it runs).
func (s *State) joinerWaits(n *node) bool {
	if !s.pause.GetPaused() {
		return false
	}
	return !contract.JoinersGetLastGood(s.pause) || n.desired != nil
}

// resumePickups restarts, at resume, the deadlines of every node whose
// agent held its operation: a write that landed and was not picked up,
// or an operation its agent (paused, idle — e.g. restarted mid-apply)
// was not running. Its agent acknowledges it again once it starts it.
func (s *State) resumePickups(held map[string]bool, now time.Time) {
	for name, n := range s.inFlight.all() {
		switch {
		case held[name]:
			n.ackAt, n.writtenAt = time.Time{}, now
		case n.ackAt.IsZero() && !n.writtenAt.IsZero():
			n.writtenAt = now
		}
	}
}

// heldAtAgent reports whether n's agent has reached the control plane's
// pause: paused and idle, so whatever the coordinator started there is
// not running (its deadlines stand still).
func (s *State) heldAtAgent(n *node) bool {
	p := s.pause
	return p.GetPaused() && n.pauseAck.paused && n.pauseAck.reached(p.GetGeneration())
}

// workingAtAgent reports whether the control plane's pause waits for n's
// operation (busy): not a write that landed and that its agent has not
// picked up, nor one its agent holds (heldAtAgent).
func (s *State) workingAtAgent(n *node) bool {
	return !((n.ackAt.IsZero() && !n.writtenAt.IsZero()) || s.heldAtAgent(n))
}

// busy says which node operations the coordinator started are still
// running ("" when none). Under the control plane's pause a write that
// landed at a node whose agent has not picked it up is not running: that
// agent, paused too, will not start it. It is asked only while a pause is
// requested (syncPause), and its answer is kept across steps that cannot
// change it (Decide): per event it costs nothing unless paused, and a look
// at seven nodes in flight at most, when a step changed them (running).
func (s *State) busy(controlPlane bool) string {
	i := 0
	if controlPlane {
		i = 1
	}
	if !s.busyKnown[i] {
		s.busyWhy[i], s.busyKnown[i] = s.running(controlPlane), true
	}
	return s.busyWhy[i]
}

// running is busy's answer, worked out: how many node operations run and
// the first three nodes by name. The nodes in flight are kept by name
// (flight), those the control plane's pause waits for apart: it looks at
// seven of them at most, however many are in flight.
func (s *State) running(controlPlane bool) string {
	q := s.inFlight.nodes(controlPlane)
	count := q.len()
	var first []string
	for _, n := range q.least(3) {
		first = append(first, n.name)
	}
	switch {
	case count == 0:
		return ""
	case count > len(first):
		return fmt.Sprintf("%d node operation(s) in flight (%s, %s, %s, …)", count, first[0], first[1], first[2])
	}
	return fmt.Sprintf("%d node operation(s) in flight (%v)", count, first)
}

// quietBeat reports whether ev is a presence heartbeat of a node already
// present that carries the pause acknowledgement the state holds: it
// changes nothing busy depends on.
func (s *State) quietBeat(ev Event) bool {
	p, ok := ev.(Presence)
	if !ok || p.P == nil {
		return false
	}
	n := s.nodes[p.Node]
	return n != nil && n.present && n.pauseAck == agentPauseOf(p.P.GetPause())
}

// syncPause runs after every step: it stops or restarts the rollout's
// clock, and moves the acknowledgements, with their events.
func (s *State) syncPause(now time.Time) {
	busy := ""
	if s.pause.GetPaused() { // NextAck reads busy only then
		busy = s.busy(true)
	}
	if next := contract.NextAck(s.ack, s.pause, busy, now); next != s.ack {
		s.ack = next
		s.do(AckPause{Ack: proto.Clone(next).(*sluicev1.PauseAck)})
	}
	r := s.rollout
	if r == nil {
		s.heldAt = time.Time{}
		return
	}
	switch held := s.holding() || s.waitingWindow; {
	case held && s.heldAt.IsZero():
		s.heldAt = now
	case !held && !s.heldAt.IsZero():
		s.clockBase, s.clockFrom, s.heldAt = s.elapsed(now), now, time.Time{}
	}
	req := s.rolloutPause[r.GetId()]
	if req == nil {
		return
	}
	prev := r.GetPauseAck()
	busy = ""
	if req.GetPaused() {
		busy = s.busy(false)
	}
	next := contract.NextAck(prev, req, busy, now)
	if next == prev && proto.Equal(r.GetPause(), req) {
		return
	}
	r.Pause, r.PauseAck = clonePause(req), next
	s.changed()
	switch {
	case next.GetGeneration() != prev.GetGeneration() && req.GetPaused():
		s.emit(s.rolloutEvent("RolloutPaused", "no node operation in flight; none starts until resumed ("+contract.DescribePause(req)+")"))
	case next.GetGeneration() != prev.GetGeneration():
		s.emit(s.rolloutEvent("RolloutUnpaused", "node operations start again ("+contract.DescribePause(req)+")"))
	case next.GetWaitingFor() != "" && next.GetWaitingFor() != prev.GetWaitingFor() && prev.GetSeen() != req.GetGeneration():
		s.emit(s.rolloutEvent("RolloutPausing", "no node operation starts; waiting for "+next.GetWaitingFor()+" ("+contract.DescribePause(req)+")"))
	}
}

func clonePause(r *sluicev1.PauseRequest) *sluicev1.PauseRequest {
	if r == nil {
		return nil
	}
	return proto.Clone(r).(*sluicev1.PauseRequest)
}
