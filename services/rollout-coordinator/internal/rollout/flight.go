package rollout

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/render"
)

// flight is the set of nodes with a node operation in flight: a desired
// config or revert written, no outcome yet. Besides finding a node by name
// it keeps them ordered the two ways decisions ask for, so that no event
// looks at all of them (issue 20: a tick sorted every node in flight to
// find the late ones, which grew with maxParallel):
//
//   - due: the nodes that have a deadline, earliest first; a tick looks
//     only at those whose deadline has passed;
//   - names, and working, the ones the control plane's pause waits for:
//     by name, for the first three that busy names.
//
// Every change to what a node's deadline depends on (its write landing, its
// agent's acknowledgement, the pause its agent reached, the control plane's
// pause) goes through reschedule.
type flight struct {
	byName  map[string]*node
	due     queue
	names   queue
	working queue
}

func newFlight() flight {
	return flight{
		byName: map[string]*node{},
		due: queue{less: func(a, b *node) bool { return a.due.Before(b.due) || (a.due.Equal(b.due) && a.name < b.name) },
			at: func(n *node) *int32 { return &n.di }},
		names:   queue{less: nameLess, at: func(n *node) *int32 { return &n.ni }},
		working: queue{less: nameLess, at: func(n *node) *int32 { return &n.wi }},
	}
}

func (f *flight) len() int              { return len(f.byName) }
func (f *flight) get(name string) *node { return f.byName[name] }
func (f *flight) has(n *node) bool      { return f.byName[n.name] == n }
func (f *flight) all() map[string]*node { return f.byName }
func (f *flight) reset()                { *f = newFlight() }
func (f *flight) nodes(working bool) *queue {
	if working {
		return &f.working
	}
	return &f.names
}

// fly puts n in flight.
func (s *State) fly(n *node) {
	s.inFlight.byName[n.name] = n
	s.inFlight.names.push(n)
	s.reschedule(n)
}

// land takes n out of flight.
func (s *State) land(n *node) {
	f := &s.inFlight
	if f.byName[n.name] == n {
		delete(f.byName, n.name)
	}
	f.names.remove(n)
	f.due.remove(n)
	f.working.remove(n)
}

// reschedule files in-flight node n again after what its deadline, or
// whether the control plane's pause waits for it, depends on changed.
func (s *State) reschedule(n *node) {
	f := &s.inFlight
	if !f.has(n) {
		return
	}
	if at, _, ok := s.deadline(n); ok {
		n.due = at
		if f.due.has(n) {
			f.due.moved(n)
		} else {
			f.due.push(n)
		}
	} else {
		f.due.remove(n)
	}
	if s.workingAtAgent(n) {
		f.working.push(n)
	} else {
		f.working.remove(n)
	}
}

// rescheduleAll reschedules every node in flight: when the control plane's
// pause changes, which every node's deadline depends on (an operator's
// pause or resume: O(nodes in flight), once).
func (s *State) rescheduleAll() {
	for _, n := range s.inFlight.all() {
		s.reschedule(n)
	}
}

// deadline is when in-flight node n becomes late — the one rule that tick
// enforces and recheckTick asks to read again —, whether that is its pickup deadline
// (else its apply deadline), and ok false while nothing can make it late:
// its write has not landed, or its agent holds it under the control plane's
// pause (paused and idle; and a write that landed is not picked up by an
// agent that is paused).
func (s *State) deadline(n *node) (at time.Time, pickup, ok bool) {
	switch {
	case s.heldAtAgent(n):
		return time.Time{}, false, false
	case n.ackAt.IsZero() && !n.writtenAt.IsZero() && !s.pause.GetPaused():
		return n.writtenAt.Add(s.plan.PickupDeadline), true, true
	case !n.ackAt.IsZero():
		return n.ackAt.Add(s.plan.ApplyDeadline), false, true
	}
	return time.Time{}, false, false
}

// late says why in-flight node n is past its deadline at now, "" when it
// is not.
func (s *State) late(n *node, now time.Time) string {
	at, pickup, ok := s.deadline(n)
	switch {
	case !ok || !now.After(at):
		return ""
	case pickup:
		return fmt.Sprintf("its agent did not acknowledge %s within the pickup deadline %s", render.Short(n.target), s.plan.PickupDeadline)
	}
	return fmt.Sprintf("no final report within the apply deadline %s after its agent acknowledged", s.plan.ApplyDeadline)
}

// overdue is the in-flight nodes late at now, by name: the ones whose
// deadline passed, found without looking at the others.
func (s *State) overdue(now time.Time) []*node {
	var out []*node
	s.inFlight.due.while(func(n *node) bool { return !n.due.After(now) }, func(n *node) {
		if s.late(n, now) != "" {
			out = append(out, n)
		}
	})
	slices.SortFunc(out, byName)
	return out
}
