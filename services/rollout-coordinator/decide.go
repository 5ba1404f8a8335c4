package coordinator

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// This file is the coordinator's whole decision logic: decide takes the
// state, one event and the time, updates the state and returns the actions
// for the loop to perform. It does no I/O, reads no clock and never depends
// on map iteration order.

// progress is where a node is within the active rollout.
type progress int

const (
	progNone        progress = iota // not part of the active rollout
	progPending                     // waiting for a slot
	progInFlight                    // desired config written, no final report yet
	progProvisioned                 // reported Provisioned with the target fingerprint
	progFailed                      // reported Invalid with the target fingerprint
	progSkipped                     // left before finishing
)

func (p progress) String() string {
	return [...]string{"none", "pending", "in-progress", "provisioned", "failed", "skipped"}[p]
}

// node is what the coordinator knows of one node.
type node struct {
	name    string
	present bool
	labels  map[string]string
	status  *sluicev1.NodeStatus
	desired *sluicev1.DesiredConfig // as last read or written

	// Within the active rollout:
	prog   progress
	target string // fingerprint the rollout puts on this node
	config *sluicev1.NodeConfig
}

// state is everything decide needs. The loop owns it; only decide changes it.
type state struct {
	head           *sluicev1.Head
	headRev        *sluicev1.Revision
	lastApplied    *sluicev1.RolloutRef
	lastAppliedRev *sluicev1.Revision

	rollout     *sluicev1.Rollout // the active rollout, nil when none
	rolloutRev  *sluicev1.Revision
	maxParallel int
	halted      bool     // a node failed: start no more nodes
	pending     []string // sorted names of pending nodes
	inFlight    int

	nodes map[string]*node
}

func newState() *state { return &state{nodes: map[string]*node{}} }

// Events.
type (
	event interface{ isEvent() }

	// evLoaded is the whole owned state read at the start of a leadership term.
	evLoaded struct {
		head           *sluicev1.Head
		headRev        *sluicev1.Revision
		lastApplied    *sluicev1.RolloutRef
		lastAppliedRev *sluicev1.Revision
		active         *sluicev1.Rollout
		activeRev      *sluicev1.Revision
		presence       []*sluicev1.NodePresence
		status         []*sluicev1.NodeStatus
		desired        []*sluicev1.DesiredConfig
	}
	// evHeadMoved: the configurator moved revisions/head.
	evHeadMoved struct {
		head *sluicev1.Head
		rev  *sluicev1.Revision
	}
	// evPresence: a node's presence was written (p set) or expired (p nil).
	evPresence struct {
		node string
		p    *sluicev1.NodePresence
	}
	// evStatus: a node's agent wrote its status.
	evStatus struct{ s *sluicev1.NodeStatus }
	// evReaped: the reaper deleted a departed node's keys (its status last).
	evReaped struct{ node string }
)

func (evLoaded) isEvent()    {}
func (evHeadMoved) isEvent() {}
func (evPresence) isEvent()  {}
func (evStatus) isEvent()    {}
func (evReaped) isEvent()    {}

// Actions.
type (
	action interface{ isAction() }

	// actWriteDesired writes a node's desired config, saving the previous one
	// (as far as the state knows it) as its backup.
	actWriteDesired struct{ desired, previous *sluicev1.DesiredConfig }
	// actStartRollout creates the rollout record and points rollouts/active at it.
	actStartRollout struct{ rollout *sluicev1.Rollout }
	// actSaveRollout writes the rollout record's progress (the loop may coalesce these).
	actSaveRollout struct{ rollout *sluicev1.Rollout }
	// actFinishRollout writes the final record, clears rollouts/active and,
	// when it succeeded, moves rollouts/last-applied.
	actFinishRollout struct{ rollout *sluicev1.Rollout }
	// actEmit records a state transition.
	actEmit struct{ ev *sluicev1.Event }
)

func (actWriteDesired) isAction()  {}
func (actStartRollout) isAction()  {}
func (actSaveRollout) isAction()   {}
func (actFinishRollout) isAction() {}
func (actEmit) isAction()          {}

// maxFailuresListed bounds the failures kept in a rollout record.
const maxFailuresListed = 100

// decide applies ev to s at time now and returns what to do.
func decide(s *state, ev event, now time.Time) []action {
	var acts []action
	switch ev := ev.(type) {
	case evLoaded:
		acts = s.load(ev, now)
	case evHeadMoved:
		acts = s.headMoved(ev.head, ev.rev, now)
	case evPresence:
		acts = s.presence(ev.node, ev.p, now)
	case evStatus:
		acts = s.statusChanged(ev.s, now)
	case evReaped:
		// Its desired config is gone too: if it comes back it is configured afresh.
		n := s.nodeOf(ev.node)
		n.status, n.desired = nil, nil
	}
	return append(acts, s.fill(now)...)
}

func (s *state) nodeOf(name string) *node {
	n := s.nodes[name]
	if n == nil {
		n = &node{name: name}
		s.nodes[name] = n
	}
	return n
}

func (s *state) load(ev evLoaded, now time.Time) []action {
	*s = state{nodes: map[string]*node{}, lastApplied: ev.lastApplied, lastAppliedRev: ev.lastAppliedRev}
	for _, p := range ev.presence {
		n := s.nodeOf(p.GetNode())
		n.present, n.labels = true, p.GetLabels()
	}
	for _, st := range ev.status {
		s.nodeOf(st.GetNode()).status = st
	}
	for _, d := range ev.desired {
		s.nodeOf(d.GetNode()).desired = d
	}
	var acts []action
	switch {
	case ev.active == nil:
	case ev.active.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING && ev.activeRev != nil:
		// Resume: where each node stands is read off its desired config and status.
		acts = append(acts, s.adopt(ev.active, ev.activeRev, now)...)
	case ev.active.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING:
		// The previous leader stopped between recording the end and clearing
		// rollouts/active: finish the bookkeeping.
		if ev.active.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED &&
			s.lastApplied.GetGeneration() < ev.active.GetGeneration() {
			s.lastApplied = &sluicev1.RolloutRef{Rollout: ev.active.GetId(), Revision: ev.active.GetRevision(),
				Generation: ev.active.GetGeneration(), At: ev.active.GetFinishedAt()}
			s.lastAppliedRev = ev.activeRev
		}
		acts = append(acts, actFinishRollout{rollout: ev.active})
	}
	s.head, s.headRev = ev.head, ev.headRev
	acts = append(acts, s.headMoved(ev.head, ev.headRev, now)...)
	return append(acts, s.configureStragglers()...)
}

// headMoved starts a rollout of the head unless it is already rolling out or rolled out.
func (s *state) headMoved(h *sluicev1.Head, rev *sluicev1.Revision, now time.Time) []action {
	if h == nil || rev == nil {
		return nil
	}
	s.head, s.headRev = h, rev
	if s.rollout != nil && s.rollout.GetGeneration() >= h.GetGeneration() {
		return nil
	}
	if s.rollout == nil && s.lastApplied.GetGeneration() >= h.GetGeneration() {
		return nil
	}
	var acts []action
	if s.rollout != nil {
		acts = s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED,
			fmt.Sprintf("superseded by generation %d (revision %s)", h.GetGeneration(), render.Short(h.GetRevision())), now)
	}
	r := &sluicev1.Rollout{
		Id:               rolloutID(h),
		Revision:         h.GetRevision(),
		PreviousRevision: s.lastApplied.GetRevision(),
		Generation:       h.GetGeneration(),
		Strategy:         h.GetStrategy(),
		Phase:            sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING,
		Reason:           "head moved: " + h.GetReason(),
		StartedAt:        timestamppb.New(now),
	}
	acts = append(acts, actStartRollout{rollout: r})
	acts = append(acts, s.adopt(r, rev, now)...)
	acts = append(acts, emit(r, "RolloutStarted", fmt.Sprintf("%s; %d nodes, %d already up to date, maxParallel %d",
		r.Reason, r.Counts.GetTotal(), r.Counts.GetProvisioned(), s.maxParallel)))
	return acts
}

// rolloutID names the rollout of a head generation; a restart computes the same id.
func rolloutID(h *sluicev1.Head) string {
	return fmt.Sprintf("%d-%s", h.GetGeneration(), render.Short(h.GetRevision()))
}

// adopt makes r the active rollout and places every present node in it.
func (s *state) adopt(r *sluicev1.Rollout, rev *sluicev1.Revision, now time.Time) []action {
	s.rollout, s.rolloutRev, s.halted, s.pending, s.inFlight = r, rev, false, nil, 0
	r.Counts = &sluicev1.RolloutCounts{}
	r.Failures = nil
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		n.prog = progNone
		if n.present {
			s.place(n)
		}
	}
	mp, err := maxParallel(r.GetStrategy(), int(r.Counts.GetTotal()))
	if err != nil {
		// The configurator validates strategies; a bad one here is stored
		// state from elsewhere. Go one node at a time rather than not at all.
		mp = 1
	}
	s.maxParallel = mp
	return s.maybeFinish(now)
}

// place renders the rollout target for a present node and puts it where its
// desired config and status say it is.
func (s *state) place(n *node) {
	n.config = render.NodeConfig(s.rolloutRev, n.labels)
	n.target = render.Fingerprint(n.config)
	c := s.rollout.Counts
	c.Total++
	st := n.status
	switch {
	case st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED &&
		n.desired.GetFingerprint() == n.target:
		n.prog = progProvisioned
		c.Provisioned++
	case st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID &&
		st.GetRollout() == s.rollout.GetId():
		n.prog = progFailed
		c.Failed++
		s.recordFailure(n)
		s.halted = true
	case n.desired.GetFingerprint() == n.target && n.desired.GetRollout() == s.rollout.GetId():
		n.prog = progInFlight
		c.InProgress++
		s.inFlight++
	default:
		n.prog = progPending
		c.Pending++
		s.pending = insertSorted(s.pending, n.name)
	}
}

func (s *state) recordFailure(n *node) {
	if len(s.rollout.Failures) >= maxFailuresListed {
		return
	}
	st := n.status
	s.rollout.Failures = append(s.rollout.Failures, &sluicev1.NodeOutcome{
		Node: n.name, Phase: st.GetPhase(), Fingerprint: n.target,
		Message: st.GetMessage(), FailedCheck: st.GetFailedCheck(),
	})
}

func (s *state) presence(name string, p *sluicev1.NodePresence, now time.Time) []action {
	n := s.nodeOf(name)
	if p == nil { // lease expired: the node left
		n.present = false
		if s.rollout == nil || (n.prog != progPending && n.prog != progInFlight) {
			return nil
		}
		c := s.rollout.Counts
		if n.prog == progPending {
			c.Pending--
			s.pending = removeSorted(s.pending, name)
		} else {
			c.InProgress--
			s.inFlight--
		}
		n.prog = progSkipped
		c.Skipped++
		acts := []action{
			actSaveRollout{rollout: s.rollout},
			emitNode(s.rollout, n, "NodeSkipped", "node left (presence lease expired) before finishing; not counted as a failure"),
		}
		return append(acts, s.maybeFinish(now)...)
	}
	joined := !n.present
	n.present, n.labels = true, p.GetLabels()
	if !joined {
		return nil
	}
	if s.rollout != nil {
		if n.prog != progNone && n.prog != progSkipped {
			return nil
		}
		if n.prog == progSkipped { // it came back: it is in the rollout again
			s.rollout.Counts.Skipped--
			s.rollout.Counts.Total--
		}
		s.place(n)
		acts := []action{actSaveRollout{rollout: s.rollout},
			emitNode(s.rollout, n, "NodeJoinedRollout", "node joined during the rollout; it gets the rollout target")}
		return append(acts, s.maybeFinish(now)...)
	}
	return s.configureStraggler(n)
}

// configureStragglers gives every present node outside a rollout the last
// applied revision's config, e.g. nodes that joined while no rollout ran.
func (s *state) configureStragglers() []action {
	if s.rollout != nil {
		return nil
	}
	var acts []action
	for _, name := range s.sortedNodes() {
		acts = append(acts, s.configureStraggler(s.nodes[name])...)
	}
	return acts
}

func (s *state) configureStraggler(n *node) []action {
	if s.rollout != nil || s.lastAppliedRev == nil || !n.present {
		return nil
	}
	cfg := render.NodeConfig(s.lastAppliedRev, n.labels)
	fp := render.Fingerprint(cfg)
	if n.desired.GetFingerprint() == fp {
		return nil
	}
	d := &sluicev1.DesiredConfig{
		Node: n.name, Revision: s.lastApplied.GetRevision(), Rollout: s.lastApplied.GetRollout(),
		Fingerprint: fp, Config: cfg,
	}
	prev := n.desired
	n.desired = d
	return []action{actWriteDesired{desired: d, previous: prev}, actEmit{ev: &sluicev1.Event{
		Kind: events.KindNode, Id: n.name, Type: "NodeConfigured", Node: n.name,
		Revision: d.Revision, Rollout: d.Rollout, Fingerprint: fp,
		Reason: "node is outside any rollout and differs from the last applied revision; it gets that revision's config",
	}}}
}

func (s *state) statusChanged(st *sluicev1.NodeStatus, now time.Time) []action {
	n := s.nodeOf(st.GetNode())
	n.status = st
	if s.rollout == nil || n.prog != progInFlight || st.GetFingerprint() != n.target {
		return nil
	}
	c := s.rollout.Counts
	switch st.GetPhase() {
	case sluicev1.NodePhase_NODE_PHASE_PROVISIONED:
		n.prog = progProvisioned
		c.InProgress--
		c.Provisioned++
		s.inFlight--
	case sluicev1.NodePhase_NODE_PHASE_INVALID:
		n.prog = progFailed
		c.InProgress--
		c.Failed++
		s.inFlight--
		s.recordFailure(n)
		acts := []action{emitNode(s.rollout, n, "NodeFailed", fmt.Sprintf("node reported Invalid (%s): %s",
			orDefault(st.GetFailedCheck(), "unknown check"), st.GetMessage()))}
		if !s.halted {
			s.halted = true
			acts = append(acts, emit(s.rollout, "RolloutHalted", fmt.Sprintf(
				"node %s failed; starting no more nodes (%d pending stay untouched)", n.name, c.GetPending())))
		}
		acts = append(acts, actSaveRollout{rollout: s.rollout})
		return append(acts, s.maybeFinish(now)...)
	default:
		return nil
	}
	return append([]action{actSaveRollout{rollout: s.rollout}}, s.maybeFinish(now)...)
}

// fill starts pending nodes, in name order, while slots are free.
func (s *state) fill(now time.Time) []action {
	if s.rollout == nil || s.halted {
		return nil
	}
	var acts []action
	c := s.rollout.Counts
	for s.inFlight < s.maxParallel && len(s.pending) > 0 {
		name := s.pending[0]
		s.pending = s.pending[1:]
		n := s.nodes[name]
		n.prog = progInFlight
		c.Pending--
		c.InProgress++
		s.inFlight++
		d := &sluicev1.DesiredConfig{
			Node: name, Revision: s.rollout.GetRevision(), Rollout: s.rollout.GetId(),
			Fingerprint: n.target, Config: n.config,
		}
		prev := n.desired
		n.desired = d
		acts = append(acts, actWriteDesired{desired: d, previous: prev})
	}
	if len(acts) > 0 {
		acts = append(acts, actSaveRollout{rollout: s.rollout})
	}
	return acts
}

// maybeFinish ends the active rollout once nothing is in flight and nothing
// more will start.
func (s *state) maybeFinish(now time.Time) []action {
	r := s.rollout
	if r == nil || s.inFlight > 0 || (len(s.pending) > 0 && !s.halted) {
		return nil
	}
	c := r.Counts
	if c.GetFailed() > 0 {
		return s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, fmt.Sprintf(
			"%d node(s) failed (first: %s); %d provisioned, %d never started",
			c.GetFailed(), describeFailure(r.Failures), c.GetProvisioned(), c.GetPending()), now)
	}
	reason := fmt.Sprintf("all %d nodes provisioned", c.GetProvisioned())
	if c.GetSkipped() > 0 {
		reason = fmt.Sprintf("%d nodes provisioned, %d skipped (left during the rollout)", c.GetProvisioned(), c.GetSkipped())
	}
	return s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, reason, now)
}

func describeFailure(fs []*sluicev1.NodeOutcome) string {
	if len(fs) == 0 {
		return "none listed"
	}
	f := fs[0]
	return fmt.Sprintf("%s, %s: %s", f.GetNode(), orDefault(f.GetFailedCheck(), "unknown check"), f.GetMessage())
}

func (s *state) finish(phase sluicev1.RolloutPhase, reason string, now time.Time) []action {
	r := s.rollout
	r.Phase, r.Reason, r.FinishedAt = phase, reason, timestamppb.New(now)
	if phase == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		s.lastApplied = &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration(), At: timestamppb.New(now)}
		s.lastAppliedRev = s.rolloutRev
	}
	for _, n := range s.nodes {
		n.prog, n.target, n.config = progNone, "", nil
	}
	s.rollout, s.rolloutRev, s.pending, s.inFlight, s.halted = nil, nil, nil, 0, false
	typ := "Rollout" + phaseWord(phase)
	return []action{actFinishRollout{rollout: r}, emit(r, typ, reason)}
}

func phaseWord(p sluicev1.RolloutPhase) string {
	w := strings.TrimPrefix(p.String(), "ROLLOUT_PHASE_")
	parts := strings.Split(strings.ToLower(w), "_")
	for i, x := range parts {
		parts[i] = strings.ToUpper(x[:1]) + x[1:]
	}
	return strings.Join(parts, "")
}

func emit(r *sluicev1.Rollout, typ, reason string) action {
	return actEmit{ev: &sluicev1.Event{
		Kind: events.KindRollout, Id: r.GetId(), Type: typ, Reason: reason,
		Rollout: r.GetId(), Revision: r.GetRevision(),
	}}
}

func emitNode(r *sluicev1.Rollout, n *node, typ, reason string) action {
	return actEmit{ev: &sluicev1.Event{
		Kind: events.KindNode, Id: n.name, Type: typ, Reason: reason, Node: n.name,
		Rollout: r.GetId(), Revision: r.GetRevision(), Fingerprint: n.target,
	}}
}

func (s *state) sortedNodes() []string {
	names := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func insertSorted(xs []string, x string) []string {
	i, found := slices.BinarySearch(xs, x)
	if found {
		return xs
	}
	return slices.Insert(xs, i, x)
}

func removeSorted(xs []string, x string) []string {
	i, found := slices.BinarySearch(xs, x)
	if !found {
		return xs
	}
	return slices.Delete(xs, i, i+1)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// snapshot copies the rollout record for an action, so that later decisions
// do not change what the loop writes.
func snapshot(r *sluicev1.Rollout) *sluicev1.Rollout { return proto.Clone(r).(*sluicev1.Rollout) }
