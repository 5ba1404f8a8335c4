package rollout

// Re-reads: what the decider asks the loop to read again from the buckets
// before it trusts what it knows, and what it does with the answers. The
// loop performs the reads (ReadStatuses, ReadDesired) and feeds each answer
// back as an event (Rechecked, DesiredRead).

import (
	"sort"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Why a node's desired config is read again (ReadDesired.Why).
const (
	whyReturning = "node back (or its agent restarted): its desired config is read before the one last written is trusted"
	whyUnlisted  = "its desired key is missing from a listing of the bucket"
)

// recheckTick is a Tick with Recheck set: the in-flight nodes it would time
// out have their statuses read first (a report the watch missed — its
// consumer sat on a server that stopped: chaos seed 12 — must not time a
// healthy node out), and the deadlines are checked when they come back
// (Rechecked). It reports whether it asked for the reads.
func (s *State) recheckTick(now time.Time) bool {
	if s.rollout == nil || s.elapsed(now) > s.plan.Progress {
		return false // nothing in flight, or the progress deadline ends it all
	}
	late := s.overdue(now)
	if len(late) == 0 {
		return false
	}
	nodes := make([]string, len(late))
	for i, n := range late {
		nodes[i] = n.name
	}
	s.do(ReadStatuses{Nodes: nodes})
	return true
}

// rechecked takes the statuses read again for a recheckTick, then checks
// the deadlines.
func (s *State) rechecked(ev Rechecked, now time.Time) {
	for _, st := range ev.Statuses {
		s.statusChanged(st, now)
	}
	s.expireInvalid(now)
	s.tick(now)
}

// returning says whether presence p of node brings it back — it is not
// present now, or its agent started again since the last presence — while
// the state believes it has a desired config in the bucket: that key is
// read before the state trusts it (a reap the state never heard of may have
// deleted it: chaos seed 160; and a leave whose expiry marker the watch did
// not deliver is seen only as an agent that restarted).
func (s *State) returning(node string, p *sluicev1.NodePresence) bool {
	n := s.nodes[node]
	if n == nil || n.desired == nil || p == nil {
		return false
	}
	return !n.present || !n.startedAt.sameInstant(p.GetStartedAt())
}

// desiredListed asks for the desired key of every node the state believes
// configured that a listing of the nodeconfigs bucket lacks: a deletion the
// loop never heard of (the reaper deletes a node's keys, and only a status
// deletion tells the loop; chaos seed 160) must not leave a node
// unconfigured until its agent restarts. A listing may end early, so each
// is read from the stream's leader before it counts as gone. This walks
// the fleet: it comes once per verify interval, as a term's load does.
func (s *State) desiredListed(ev DesiredListed) {
	var missing []string
	for name, n := range s.nodes {
		if n.desired != nil && !ev.Keys[contract.DesiredKey(name)] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		s.do(ReadDesired{Node: name, Why: whyUnlisted, Listed: ev.Started})
	}
}

// desiredRead takes the answer to a ReadDesired: a key found gone is taken
// as a reap, so that the node is configured afresh; then the presence that
// waited for the read, if any, is taken.
func (s *State) desiredRead(ev DesiredRead, now time.Time) {
	if ev.Gone {
		s.reaped(ev.Node, now)
	}
	if ev.P != nil {
		s.presence(ev.Node, ev.P, now)
	}
}

// reaped forgets what the reaper deleted of a departed node: its status,
// desired and backup configs. If it comes back it is configured afresh; if
// it came back before the reap was seen (the watchers of presence and
// status are apart), it joins now.
func (s *State) reaped(node string, now time.Time) {
	n := s.nodeOf(node)
	n.status, n.desired, n.backup = nil, nil, nil
	if n.present {
		s.setPresent(n, false)
		s.presence(n.name, &sluicev1.NodePresence{Node: n.name, Labels: n.labelMap(), AgentVersion: n.version(), ConfigFeatures: n.readsList()}, now)
	}
}
