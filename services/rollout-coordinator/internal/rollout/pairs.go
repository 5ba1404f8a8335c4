package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
)

// Redundancy groups (contract.LabelPair): nodes that back each other up —
// an MLAG pair, two route reflectors — are never unproven at the same time
// within a rollout. A member is unproven from the moment its desired config
// is written until it reports Provisioned, and, when the strategy bakes
// between stages, until the bake after the stage it was provisioned in
// (unbaked). A pending node whose group has an unproven member waits,
// whatever maxParallel and the waves allow: the pending queue orders such
// nodes last, so fill stops at the first one and every node after it waits
// too (nodes of no group are never held back).
//
// Only members of one rollout count: a group's members that are already up
// to date are proven. A failed, timed-out, skipped or stopped member no
// longer holds its group: its agent put its last-good config back, or the
// rollout stops. Reverts are not held: putting nodes back on their proven
// backups is what a failure needs, at once.
//
// After a takeover the new term cannot tell which provisioned members were
// baked, so it takes every member this rollout provisioned as unbaked:
// slower, never less safe. A bake the term resumes still running (or held
// by a pause) covers them all, as no node was in flight when it began; one
// whose time ran out while no coordinator led does not (bake.go).

// pairGroup is one redundancy group's members within the active rollout.
type pairGroup struct {
	name    string
	members []*node
}

// joinGroup puts n, being placed in the active rollout, in the group its
// labels name (its group for the whole rollout, whatever its labels
// become).
func (s *State) joinGroup(n *node) {
	n.group = nil
	name := n.labelMap()[contract.LabelPair]
	if name == "" {
		return
	}
	if s.groups == nil {
		s.groups = map[string]*pairGroup{}
	}
	g := s.groups[name]
	if g == nil {
		g = &pairGroup{name: s.intern(name)}
		s.groups[name] = g
	}
	g.members = append(g.members, n)
	n.group = g
}

// unprovenMate is a member of n's group other than n that is unproven,
// nil when there is none (or n is in no group).
func (s *State) unprovenMate(n *node) *node {
	if n.group == nil {
		return nil
	}
	for _, m := range n.group.members {
		if m != n && (m.prog == progInFlight || m.unbaked) {
			return m
		}
	}
	return nil
}

// held reports whether pending node n waits for a member of its group.
func (s *State) held(n *node) bool { return s.unprovenMate(n) != nil }

// stagedBake reports whether members stay unproven after Provisioned until
// a bake: the strategy bakes, between waves or failure domains.
func (s *State) stagedBake() bool {
	return s.plan.Bake > 0 && (s.plan.Waves != nil || s.plan.DomainKey != "")
}

// regroup follows n's progress from one state to another: a member that
// reaches Provisioned from flight under a staged bake stays unproven until
// the bake; any other change ends that. Its group's pending members are
// filed again, as whether they wait may have changed.
func (s *State) regroup(n *node, from, to progress) {
	if n.group == nil || from == to {
		return
	}
	switch {
	case from == progInFlight && to == progProvisioned && s.stagedBake():
		n.unbaked = true
		s.unbaked = append(s.unbaked, n)
	case to != progProvisioned:
		n.unbaked = false
	}
	s.refile(n.group)
}

// refile puts g's pending members back in order after a member changed.
func (s *State) refile(g *pairGroup) {
	for _, m := range g.members {
		if s.pending.has(m) {
			s.pending.moved(m)
		}
	}
}

// bakedNow proves every member provisioned before the bake that just
// passed.
func (s *State) bakedNow() {
	for _, n := range s.unbaked {
		if n.unbaked {
			n.unbaked = false
			s.refile(n.group)
		}
	}
	s.unbaked = nil
}

// unbakedAfterTakeover marks every member this rollout provisioned as
// unbaked, when the strategy bakes between stages (see the package note).
func (s *State) unbakedAfterTakeover() {
	if !s.stagedBake() {
		return
	}
	for _, g := range s.groups {
		for _, m := range g.members {
			if m.prog == progProvisioned && m.touched && !m.unbaked {
				m.unbaked = true
				s.unbaked = append(s.unbaked, m)
			}
		}
		s.refile(g)
	}
}

// forgetGroups ends the groups of the rollout that ended or is placed anew.
func (s *State) forgetGroups() {
	for _, g := range s.groups {
		for _, m := range g.members {
			m.group, m.unbaked = nil, false
		}
	}
	s.groups, s.unbaked, s.pairWait = nil, nil, ""
}

// waitForPair is fill's answer when the first pending node, n, waits for
// its group: it says so once per waiting node and, when nothing is in
// flight and only members awaiting a bake hold the rest, bakes now, as at
// the end of a stage (else nothing would ever bake them).
func (s *State) waitForPair(n *node, now time.Time) {
	mate := s.unprovenMate(n)
	if s.pairWait != n.name {
		s.pairWait = n.name
		state := "in flight"
		if mate.unbaked {
			state = "provisioned, waiting for the bake"
		}
		s.emit(s.nodeEvent(n, "NodeWaitingForPair", fmt.Sprintf(
			"waits for %s of its redundancy group %q (label %s), %s: members of a group are never unproven together",
			mate.name, n.group.name, contract.LabelPair, state)))
	}
	if s.inFlight.len() > 0 || s.baking() || !mate.unbaked {
		return
	}
	s.startBake(now, fmt.Sprintf("%s waits for %s", n.name, strings.Join(s.unbakedNames(3), ", ")))
}

// unbakedNames names up to k members awaiting the bake.
func (s *State) unbakedNames(k int) []string {
	var out []string
	for _, n := range s.unbaked {
		if n.unbaked && len(out) < k {
			out = append(out, n.name)
		}
	}
	return out
}
