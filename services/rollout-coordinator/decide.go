package coordinator

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// This file is the coordinator's whole decision logic: decide takes the
// state, one event and the time, updates the state and returns the actions
// for the loop to perform. It does no I/O, reads no clock and never depends
// on map iteration order. docs/rollouts.md draws the state machine.

// progress is where a node is within the active rollout.
type progress int

const (
	progNone         progress = iota // not part of the active rollout
	progPending                      // waiting for a slot
	progInFlight                     // desired config written, no final report yet
	progProvisioned                  // reported Provisioned with the target fingerprint
	progFailed                       // reported Invalid with the target fingerprint
	progTimedOut                     // no final report within its deadline
	progSkipped                      // left before finishing
	progRefused                      // its target is a known-bad fingerprint: never touched
	progReverting                    // its backup is being written back
	progReverted                     // reported its backup in force
	progRevertFailed                 // the revert failed or timed out
)

func (p progress) String() string {
	return [...]string{"none", "pending", "in-progress", "provisioned", "failed", "timed-out", "skipped",
		"refused", "reverting", "reverted", "revert-failed"}[p]
}

// node is what the coordinator knows of one node.
type node struct {
	name    string
	present bool
	labels  map[string]string
	status  *sluicev1.NodeStatus
	desired *sluicev1.DesiredConfig // as last read or written

	// Within the active rollout:
	prog      progress
	domain    string // sort key of its failure-domain value
	target    string // fingerprint the rollout (or revert) puts on this node
	config    *sluicev1.NodeConfig
	previous  *sluicev1.DesiredConfig // desired config before this rollout wrote it: the revert target
	touched   bool                    // this rollout wrote its desired config
	writtenAt time.Time               // when its desired config was written, in this leadership term
	ackAt     time.Time               // when its agent acknowledged (Provisioning); zero before
}

// state is everything decide needs. The loop owns it; only decide changes it.
type state struct {
	head           *sluicev1.Head
	headRev        *sluicev1.Revision
	lastApplied    *sluicev1.RolloutRef
	lastAppliedRev *sluicev1.Revision
	invalid        map[string]*sluicev1.InvalidFingerprint

	rollout    *sluicev1.Rollout // the active rollout, nil when none
	rolloutRev *sluicev1.Revision
	plan       plan
	pending    []*node          // sorted by (domain, name)
	inFlight   map[string]*node // desired (or revert) written, no outcome yet
	started    int              // nodes started in this rollout (for waves)
	domainSet  bool             // a failure-domain value is in progress
	bakeUntil  time.Time        // no node starts before it
	baked      bool             // the bake before the next stage is over
	reverting  bool             // stopped over budget: putting touched nodes back
	revertQ    []*node          // sorted by name
	stopReason string           // why the rollout stopped, for the final reason
	clockBase  time.Duration    // leader time the rollout had at the start of this term
	clockFrom  time.Time        // start of this term (or of the rollout)

	nodes map[string]*node
}

func newState() *state {
	return &state{nodes: map[string]*node{}, invalid: map[string]*sluicev1.InvalidFingerprint{}, inFlight: map[string]*node{}}
}

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
		backups        []*sluicev1.DesiredConfig
		invalid        []*sluicev1.InvalidFingerprint
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
	// evTick: time passed; deadlines and bake times are checked.
	evTick struct{}
)

func (evLoaded) isEvent()    {}
func (evHeadMoved) isEvent() {}
func (evPresence) isEvent()  {}
func (evStatus) isEvent()    {}
func (evReaped) isEvent()    {}
func (evTick) isEvent()      {}

// Actions.
type (
	action interface{ isAction() }

	// actWriteDesired writes a node's desired config, saving the previous one
	// (as far as the state knows it) as its backup — except for a revert,
	// which writes the backup back and leaves the backup key alone.
	actWriteDesired struct{ desired, previous *sluicev1.DesiredConfig }
	// actStartRollout creates the rollout record and points rollouts/active at it.
	actStartRollout struct{ rollout *sluicev1.Rollout }
	// actSaveRollout writes the rollout record's progress (the loop may coalesce these).
	actSaveRollout struct{ rollout *sluicev1.Rollout }
	// actFinishRollout writes the final record, clears rollouts/active and,
	// when the revision is in force (Succeeded, PartiallyFailed), moves rollouts/last-applied.
	actFinishRollout struct{ rollout *sluicev1.Rollout }
	// actRecordInvalid records a fingerprint as known bad, with why.
	actRecordInvalid struct{ fp *sluicev1.InvalidFingerprint }
	// actForgetInvalid deletes a recorded fingerprint (an operator retries it on purpose).
	actForgetInvalid struct{ fingerprint string }
	// actEmit records a state transition.
	actEmit struct{ ev *sluicev1.Event }
)

func (actWriteDesired) isAction()  {}
func (actStartRollout) isAction()  {}
func (actSaveRollout) isAction()   {}
func (actFinishRollout) isAction() {}
func (actRecordInvalid) isAction() {}
func (actForgetInvalid) isAction() {}
func (actEmit) isAction()          {}

// maxListed bounds the failures and skipped nodes kept in a rollout record.
const maxListed = 100

// maxOutput bounds a check's output kept in records.
const maxOutput = 2048

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
	case evTick:
		acts = s.tick(now)
	}
	acts = append(acts, s.fill(now)...)
	acts = append(acts, s.maybeFinish(now)...)
	if s.rollout != nil {
		s.rollout.LeaderTime = durationpb.New(s.elapsed(now))
	}
	return acts
}

func (s *state) nodeOf(name string) *node {
	n := s.nodes[name]
	if n == nil {
		n = &node{name: name}
		s.nodes[name] = n
	}
	return n
}

// elapsed is the time the active rollout has run under a leader.
func (s *state) elapsed(now time.Time) time.Duration { return s.clockBase + now.Sub(s.clockFrom) }

func (s *state) load(ev evLoaded, now time.Time) []action {
	*s = *newState()
	s.lastApplied, s.lastAppliedRev = ev.lastApplied, ev.lastAppliedRev
	for _, f := range ev.invalid {
		s.invalid[f.GetFingerprint()] = f
	}
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
	backups := map[string]*sluicev1.DesiredConfig{}
	for _, b := range ev.backups {
		backups[b.GetNode()] = b
	}
	var acts []action
	switch {
	case ev.active == nil:
	case ev.active.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING ||
		ev.active.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING:
		if ev.activeRev != nil {
			// Resume: where each node stands is read off its desired config and
			// status. Deadlines restart now: time without a leader does not count.
			acts = append(acts, s.adopt(ev.active, ev.activeRev, backups, now)...)
		}
	default:
		// The previous leader stopped between recording the end and clearing
		// rollouts/active: finish the bookkeeping.
		if inForce(ev.active.GetPhase()) && s.lastApplied.GetGeneration() < ev.active.GetGeneration() {
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

// inForce reports whether a rollout that ended in phase left its revision in force.
func inForce(p sluicev1.RolloutPhase) bool {
	return p == sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || p == sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED
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
	acts = append(acts, s.adopt(r, rev, nil, now)...)
	if s.rollout == nil { // refused at once
		return acts
	}
	return append(acts, emit(r, "RolloutStarted", fmt.Sprintf("%s; %d nodes, %d already up to date; %s",
		r.Reason, r.Counts.GetTotal(), r.Counts.GetProvisioned(), s.plan.describe())))
}

func (p plan) describe() string {
	parts := []string{fmt.Sprintf("maxParallel %d", p.maxParallel), fmt.Sprintf("failure budget %d", p.budget)}
	if p.waves != nil {
		parts = append(parts, fmt.Sprintf("waves ending at %v nodes", p.waves))
	}
	if p.domainKey != "" {
		parts = append(parts, "one "+p.domainKey+" at a time")
	}
	if p.bake > 0 {
		parts = append(parts, "bake "+p.bake.String())
	}
	return strings.Join(parts, ", ")
}

// rolloutID names the rollout of a head generation; a restart computes the same id.
func rolloutID(h *sluicev1.Head) string {
	return contract.RolloutID(h.GetGeneration(), h.GetRevision())
}

// adopt makes r the active rollout and places every present node in it.
// backups (known only when resuming) are the revert targets of touched nodes.
func (s *state) adopt(r *sluicev1.Rollout, rev *sluicev1.Revision, backups map[string]*sluicev1.DesiredConfig, now time.Time) []action {
	s.rollout, s.rolloutRev = r, rev
	s.pending, s.inFlight, s.started, s.domainSet, s.bakeUntil, s.baked = nil, map[string]*node{}, 0, false, time.Time{}, false
	s.reverting, s.revertQ, s.stopReason = false, nil, ""
	s.clockBase, s.clockFrom = r.GetLeaderTime().AsDuration(), now
	resuming := r.Counts != nil
	r.Counts = &sluicev1.RolloutCounts{}
	prevFailures := r.Failures
	r.Failures, r.Skipped = nil, nil
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		n.prog, n.previous, n.writtenAt, n.ackAt, n.touched = progNone, nil, time.Time{}, time.Time{}, false
		if n.present {
			n.previous = backups[name]
			s.place(n, now)
		}
	}
	var err error
	if s.plan, err = resolve(r.GetStrategy(), int(r.Counts.GetTotal())); err != nil {
		// The configurator validates strategies; a bad one here is stored
		// state from elsewhere. Go one node at a time rather than not at all.
		s.plan = plan{maxParallel: 1, applyDeadline: DefaultApplyDeadline, pickupDeadline: DefaultPickupDeadline, progress: DefaultProgressDeadline}
	}
	if resuming && r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
		r.Failures = prevFailures
		s.stopReason = r.GetReason()
		return s.startRevert(now, r.GetReason())
	}
	return s.refuseKnownBad(now)
}

// refuseKnownBad checks every target the rollout would write against the
// invalid set before any node is touched.
func (s *state) refuseKnownBad(now time.Time) []action {
	var bad []*node
	for _, n := range s.pending {
		if s.invalid[n.target] != nil {
			bad = append(bad, n)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if s.plan.retryInvalid {
		var acts []action
		seen := map[string]bool{}
		for _, n := range bad {
			if seen[n.target] {
				continue
			}
			seen[n.target] = true
			f := s.invalid[n.target]
			delete(s.invalid, n.target)
			acts = append(acts, actForgetInvalid{fingerprint: n.target}, actEmit{ev: &sluicev1.Event{
				Kind: events.KindFingerprint, Id: n.target, Type: "FingerprintForgiven", Fingerprint: n.target,
				Rollout: s.rollout.GetId(), Revision: s.rollout.GetRevision(),
				Reason: fmt.Sprintf("retried on purpose (retryInvalid); it was recorded invalid on %s by check %s: %s",
					f.GetNode(), f.GetCheck(), f.GetOutput()),
			}})
		}
		return acts
	}
	var acts []action
	for _, n := range bad {
		f := s.invalid[n.target]
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_REFUSED, f.GetCheck(), f.GetOutput(),
			fmt.Sprintf("target fingerprint %s is recorded invalid (failed on %s in rollout %s)", render.Short(n.target), f.GetNode(), f.GetRollout()))
		s.setProg(n, progRefused)
	}
	s.pending = nil
	f := s.invalid[bad[0].target]
	reason := fmt.Sprintf("refused before touching any node: %d node(s) would get a fingerprint recorded invalid; first %s → %s, "+
		"which failed on %s (check %s: %s) in rollout %s; fix the intents, or apply with --retry-invalid to try it again on purpose",
		len(bad), bad[0].name, render.Short(bad[0].target), f.GetNode(), f.GetCheck(), truncate(f.GetOutput(), 200), f.GetRollout())
	// Nodes in flight from before a restart are left to finish.
	if len(s.inFlight) == 0 {
		return append(acts, s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, reason, now)...)
	}
	s.stopReason = reason
	return acts
}

// place renders the rollout target for a present node and puts it where its
// desired config and status say it is.
func (s *state) place(n *node, now time.Time) {
	n.config = render.NodeConfig(s.rolloutRev, n.labels)
	n.target = render.Fingerprint(n.config)
	n.domain = domainOf(s.rollout.GetStrategy().GetFailureDomain(), n.labels)
	s.rollout.Counts.Total++
	st := n.status
	switch {
	case st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED &&
		n.desired.GetFingerprint() == n.target:
		s.setProg(n, progProvisioned)
		n.touched = n.desired.GetRollout() == s.rollout.GetId()
	case st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID &&
		st.GetRollout() == s.rollout.GetId():
		s.setProg(n, progFailed)
		n.touched = true
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, st.GetFailedCheck(), st.GetCheckOutput(), st.GetMessage())
	case n.desired.GetFingerprint() == n.target && n.desired.GetRollout() == s.rollout.GetId() && !n.desired.GetRevert():
		// Written before a restart: wait for it, with a fresh deadline.
		s.setProg(n, progInFlight)
		s.inFlight[n.name] = n
		s.started++
		n.touched = true
		n.writtenAt = now
		if st.GetFingerprint() == n.target && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
			n.ackAt = now
		}
	default:
		s.setProg(n, progPending)
		s.pending = insertNode(s.pending, n)
	}
}

// domainOf is a node's failure-domain sort key: nodes without the label sort last.
func domainOf(key string, labels map[string]string) string {
	if key == "" {
		return ""
	}
	if v, ok := labels[key]; ok {
		return "0" + v
	}
	return "1"
}

func domainName(d string) string {
	if d == "1" {
		return "(unlabelled)"
	}
	return strings.TrimPrefix(d, "0")
}

// setProg moves n to p, keeping the rollout's counts.
func (s *state) setProg(n *node, p progress) {
	c := s.rollout.Counts
	if f := counter(c, n.prog); f != nil {
		*f--
	}
	n.prog = p
	if f := counter(c, p); f != nil {
		*f++
	}
}

func counter(c *sluicev1.RolloutCounts, p progress) *uint32 {
	switch p {
	case progPending:
		return &c.Pending
	case progInFlight:
		return &c.InProgress
	case progProvisioned:
		return &c.Provisioned
	case progFailed, progRefused, progRevertFailed:
		return &c.Failed
	case progTimedOut:
		return &c.TimedOut
	case progSkipped:
		return &c.Skipped
	case progReverting:
		return &c.Reverting
	case progReverted:
		return &c.Reverted
	}
	return nil
}

func (s *state) failures() int {
	return int(s.rollout.Counts.GetFailed() + s.rollout.Counts.GetTimedOut())
}

func (s *state) recordOutcome(n *node, res sluicev1.NodeResult, check, output, msg string) {
	o := &sluicev1.NodeOutcome{Node: n.name, Phase: n.status.GetPhase(), Fingerprint: n.target, Result: res,
		FailedCheck: check, Output: truncate(output, maxOutput), Message: msg}
	if res == sluicev1.NodeResult_NODE_RESULT_SKIPPED {
		if len(s.rollout.Skipped) < maxListed {
			s.rollout.Skipped = append(s.rollout.Skipped, o)
		}
		return
	}
	for i, f := range s.rollout.Failures {
		if f.GetNode() == n.name && f.GetFailedCheck() != "revert" && check != "revert" {
			s.rollout.Failures[i] = o // listed once per rollout step, with its latest outcome
			return
		}
	}
	if len(s.rollout.Failures) < maxListed {
		s.rollout.Failures = append(s.rollout.Failures, o)
	}
}

func (s *state) presence(name string, p *sluicev1.NodePresence, now time.Time) []action {
	n := s.nodeOf(name)
	if p == nil { // lease expired: the node left
		n.present = false
		if s.rollout == nil {
			return nil
		}
		switch n.prog {
		case progPending:
			s.pending = removeNode(s.pending, n)
		case progInFlight, progReverting:
			delete(s.inFlight, name)
		default:
			return nil
		}
		s.setProg(n, progSkipped)
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_SKIPPED, "", "", "node left (presence lease expired) before finishing")
		return []action{actSaveRollout{rollout: s.rollout},
			emitNode(s.rollout, n, "NodeSkipped", "node left (presence lease expired) before finishing; not counted as a failure")}
	}
	joined := !n.present
	n.present, n.labels = true, p.GetLabels()
	if !joined {
		return nil
	}
	if s.rollout != nil {
		if s.reverting || (n.prog != progNone && n.prog != progSkipped) {
			return nil
		}
		if n.prog == progSkipped { // it came back: it is in the rollout again
			s.setProg(n, progNone)
			s.rollout.Counts.Total--
		}
		s.place(n, now)
		return []action{actSaveRollout{rollout: s.rollout},
			emitNode(s.rollout, n, "NodeJoinedRollout", "node joined during the rollout; it gets the rollout target")}
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
	if n.desired.GetFingerprint() == fp || s.invalid[fp] != nil {
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
	if s.rollout == nil || s.inFlight[n.name] != n || st.GetFingerprint() != n.target {
		return nil
	}
	phase := st.GetPhase()
	if phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
		if n.ackAt.IsZero() {
			n.ackAt = now
		}
		return nil
	}
	if phase != sluicev1.NodePhase_NODE_PHASE_PROVISIONED && phase != sluicev1.NodePhase_NODE_PHASE_INVALID {
		return nil
	}
	delete(s.inFlight, n.name)
	if n.prog == progReverting {
		if phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
			s.setProg(n, progReverted)
			return []action{actSaveRollout{rollout: s.rollout}, emitNode(s.rollout, n, "NodeReverted",
				fmt.Sprintf("backup %s is in force again", render.Short(n.target)))}
		}
		return s.revertFailed(n, fmt.Sprintf("the agent could not put backup %s in force (%s): %s",
			render.Short(n.target), orDefault(st.GetFailedCheck(), "unknown check"), st.GetMessage()))
	}
	if phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		s.setProg(n, progProvisioned)
		return []action{actSaveRollout{rollout: s.rollout}}
	}
	// Invalid: the config failed on this node. Remember its fingerprint.
	s.setProg(n, progFailed)
	check := orDefault(st.GetFailedCheck(), "unknown check")
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, check, st.GetCheckOutput(), st.GetMessage())
	acts := []action{actSaveRollout{rollout: s.rollout},
		emitNode(s.rollout, n, "NodeFailed", fmt.Sprintf("node reported Invalid (%s): %s", check, st.GetMessage()))}
	if s.invalid[n.target] == nil {
		f := &sluicev1.InvalidFingerprint{Fingerprint: n.target, Revision: s.rollout.GetRevision(), Rollout: s.rollout.GetId(),
			Node: n.name, Check: check, Output: truncate(st.GetCheckOutput(), maxOutput), Time: timestamppb.New(now)}
		s.invalid[n.target] = f
		acts = append(acts, actRecordInvalid{fp: f}, actEmit{ev: &sluicev1.Event{
			Kind: events.KindFingerprint, Id: n.target, Type: "FingerprintInvalid", Fingerprint: n.target, Node: n.name,
			Rollout: s.rollout.GetId(), Revision: s.rollout.GetRevision(),
			Reason: fmt.Sprintf("failed on %s, check %s: %s", n.name, check, truncate(st.GetCheckOutput(), 200)),
		}})
	}
	return append(acts, s.overBudget(n, fmt.Sprintf("node %s failed check %s: %s", n.name, check, st.GetMessage()), now)...)
}

// overBudget stops and reverts once failures exceed the budget.
func (s *state) overBudget(n *node, what string, now time.Time) []action {
	if s.reverting || s.failures() <= s.plan.budget {
		return nil
	}
	reason := fmt.Sprintf("%s; %d failure(s) exceed the failure budget of %d", what, s.failures(), s.plan.budget)
	return s.startRevert(now, reason)
}

// startRevert stops starting nodes and queues every node this rollout
// touched for its backup, written back with the same concurrency limit.
func (s *state) startRevert(now time.Time, reason string) []action {
	r := s.rollout
	s.reverting, s.stopReason, s.bakeUntil = true, reason, time.Time{}
	r.Phase, r.Reason = sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, reason
	var acts []action
	s.revertQ = nil
	for _, name := range s.sortedNodes() {
		n := s.nodes[name]
		if !n.touched || !n.present {
			continue
		}
		switch n.prog {
		case progInFlight, progProvisioned, progFailed, progTimedOut:
		default:
			continue
		}
		backup := n.previous
		if backup == nil {
			// A node with no earlier config goes back to an empty one.
			cfg := &sluicev1.NodeConfig{}
			backup = &sluicev1.DesiredConfig{Node: n.name, Config: cfg, Fingerprint: render.Fingerprint(cfg)}
		}
		if s.invalid[backup.GetFingerprint()] != nil {
			delete(s.inFlight, n.name)
			acts = append(acts, s.revertFailed(n, fmt.Sprintf("backup %s is recorded invalid; left on %s",
				render.Short(backup.GetFingerprint()), render.Short(n.desired.GetFingerprint())))...)
			continue
		}
		delete(s.inFlight, n.name)
		s.setProg(n, progReverting)
		n.target, n.config = backup.GetFingerprint(), backup.GetConfig()
		n.previous = backup
		s.revertQ = append(s.revertQ, n)
	}
	for _, p := range s.pending {
		p.prog = progNone
		s.rollout.Counts.Pending--
	}
	s.pending = nil
	acts = append(acts, actSaveRollout{rollout: r}, emit(r, "RolloutReverting",
		fmt.Sprintf("%s; reverting %d touched node(s) to their backups, %d at a time", reason, len(s.revertQ), s.plan.maxParallel)))
	return acts
}

func (s *state) revertFailed(n *node, msg string) []action {
	s.setProg(n, progRevertFailed)
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, "revert", "", msg)
	return []action{actSaveRollout{rollout: s.rollout}, emitNode(s.rollout, n, "NodeRevertFailed", msg+"; the node needs an operator")}
}

// tick enforces deadlines and ends bake times.
func (s *state) tick(now time.Time) []action {
	if s.rollout == nil {
		return nil
	}
	if e := s.elapsed(now); e > s.plan.progress {
		reason := fmt.Sprintf("progress deadline %s exceeded after %s under a leader", s.plan.progress, e.Round(time.Second))
		if s.stopReason != "" {
			reason = s.stopReason + "; then " + reason
		}
		return s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, reason+"; nodes are left as they are", now)
	}
	var acts []action
	names := make([]string, 0, len(s.inFlight))
	for name := range s.inFlight {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		n := s.inFlight[name]
		var why string
		switch {
		case n.ackAt.IsZero() && now.Sub(n.writtenAt) > s.plan.pickupDeadline:
			why = fmt.Sprintf("its agent did not acknowledge %s within the pickup deadline %s", render.Short(n.target), s.plan.pickupDeadline)
		case !n.ackAt.IsZero() && now.Sub(n.ackAt) > s.plan.applyDeadline:
			why = fmt.Sprintf("no final report within the apply deadline %s after its agent acknowledged", s.plan.applyDeadline)
		default:
			continue
		}
		delete(s.inFlight, name)
		if n.prog == progReverting {
			acts = append(acts, s.revertFailed(n, "revert timed out: "+why)...)
			continue
		}
		s.setProg(n, progTimedOut)
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_TIMED_OUT, "deadline", "", why)
		acts = append(acts, actSaveRollout{rollout: s.rollout}, emitNode(s.rollout, n, "NodeTimedOut", why))
		acts = append(acts, s.overBudget(n, fmt.Sprintf("node %s timed out: %s", n.name, why), now)...)
	}
	return append(acts, actSaveRollout{rollout: s.rollout})
}

// fill starts nodes while slots are free: revert writes when reverting,
// otherwise pending nodes in (failure domain, name) order within the
// current wave and domain, after any bake time.
func (s *state) fill(now time.Time) []action {
	if s.rollout == nil {
		return nil
	}
	if s.reverting {
		return s.fillRevert(now)
	}
	if s.stopReason != "" {
		return nil
	}
	var acts []action
	r := s.rollout
	for len(s.inFlight) < s.plan.maxParallel && len(s.pending) > 0 {
		if !s.bakeUntil.IsZero() {
			if now.Before(s.bakeUntil) {
				break
			}
			s.bakeUntil, s.baked = time.Time{}, true
			r.BakeUntil = nil
		}
		n := s.pending[0]
		boundary, what := s.boundary(n)
		if boundary {
			if len(s.inFlight) > 0 {
				break // finish the stage first
			}
			if s.plan.bake > 0 && !s.baked && s.started > 0 {
				s.bakeUntil = now.Add(s.plan.bake)
				r.BakeUntil = timestamppb.New(s.bakeUntil)
				acts = append(acts, actSaveRollout{rollout: r}, emit(r, "RolloutBaking",
					fmt.Sprintf("%s finished; baking %s before %s", s.stageName(), s.plan.bake, what)))
				break
			}
			s.baked = false
			acts = append(acts, s.advance(n)...)
		}
		s.pending = s.pending[1:]
		s.started++
		s.setProg(n, progInFlight)
		s.inFlight[n.name] = n
		n.writtenAt, n.ackAt, n.touched = now, time.Time{}, true
		d := &sluicev1.DesiredConfig{
			Node: n.name, Revision: r.GetRevision(), Rollout: r.GetId(), Fingerprint: n.target, Config: n.config,
		}
		n.previous = n.desired
		n.desired = d
		acts = append(acts, actWriteDesired{desired: d, previous: n.previous})
	}
	if len(acts) > 0 {
		acts = append(acts, actSaveRollout{rollout: r})
	}
	return acts
}

// boundary reports whether starting n begins a new wave or failure domain.
func (s *state) boundary(n *node) (bool, string) {
	r := s.rollout
	if s.plan.waves != nil {
		w := int(r.GetWave())
		if w == 0 || (w <= len(s.plan.waves) && s.started >= s.plan.waves[w-1]) {
			return true, fmt.Sprintf("wave %d", w+1)
		}
	}
	if s.plan.domainKey != "" && (!s.domainSet || n.domain > s.rollout.GetDomain()) {
		return true, fmt.Sprintf("%s %s", s.plan.domainKey, domainName(n.domain))
	}
	return false, ""
}

func (s *state) stageName() string {
	r := s.rollout
	if s.plan.waves != nil {
		return fmt.Sprintf("wave %d", r.GetWave())
	}
	return fmt.Sprintf("%s %s", s.plan.domainKey, domainName(r.GetDomain()))
}

// advance moves to the wave and domain n starts.
func (s *state) advance(n *node) []action {
	r := s.rollout
	var acts []action
	if s.plan.waves != nil {
		w := int(r.GetWave())
		if w == 0 || (w < len(s.plan.waves) && s.started >= s.plan.waves[w-1]) {
			r.Wave++
			size := s.plan.waves[r.Wave-1] - s.started
			acts = append(acts, emit(r, "WaveStarted", fmt.Sprintf("wave %d: up to %d nodes", r.Wave, size)))
		}
	}
	if s.plan.domainKey != "" && (!s.domainSet || n.domain > r.GetDomain()) {
		s.domainSet = true
		r.Domain = n.domain
		acts = append(acts, emit(r, "DomainStarted", fmt.Sprintf("%s %s", s.plan.domainKey, domainName(n.domain))))
	}
	return acts
}

func (s *state) fillRevert(now time.Time) []action {
	var acts []action
	r := s.rollout
	for len(s.inFlight) < s.plan.maxParallel && len(s.revertQ) > 0 {
		n := s.revertQ[0]
		s.revertQ = s.revertQ[1:]
		s.inFlight[n.name] = n
		n.writtenAt, n.ackAt = now, time.Time{}
		d := proto.Clone(n.previous).(*sluicev1.DesiredConfig)
		d.Node, d.Rollout, d.Revert, d.WrittenAt, d.LeaderEpoch = n.name, r.GetId(), true, nil, 0
		n.desired = d
		acts = append(acts, actWriteDesired{desired: d})
	}
	if len(acts) > 0 {
		acts = append(acts, actSaveRollout{rollout: r})
	}
	return acts
}

// maybeFinish ends the active rollout once nothing is in flight and nothing
// more will start.
func (s *state) maybeFinish(now time.Time) []action {
	r := s.rollout
	if r == nil || len(s.inFlight) > 0 {
		return nil
	}
	c := r.Counts
	if s.reverting {
		if len(s.revertQ) > 0 {
			return nil
		}
		reason := fmt.Sprintf("%s; %d node(s) reverted to their backups", s.stopReason, c.GetReverted())
		if n := c.GetFailed(); n > 0 {
			reason += fmt.Sprintf(", %d refused or could not be reverted (see failures)", n)
		}
		return s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK, reason, now)
	}
	if s.stopReason != "" {
		return s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, s.stopReason, now)
	}
	if len(s.pending) > 0 {
		return nil
	}
	if f := s.failures(); f > 0 {
		return s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED, fmt.Sprintf(
			"%d node(s) failed within the failure budget of %d (first: %s); %d provisioned, %d skipped",
			f, s.plan.budget, describeFailure(r.Failures), c.GetProvisioned(), c.GetSkipped()), now)
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
	r.LeaderTime = durationpb.New(s.elapsed(now))
	if inForce(phase) {
		s.lastApplied = &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration(), At: timestamppb.New(now)}
		s.lastAppliedRev = s.rolloutRev
	}
	for _, n := range s.nodes {
		n.prog, n.target, n.config, n.previous = progNone, "", nil, nil
	}
	s.rollout, s.rolloutRev, s.pending, s.inFlight, s.revertQ = nil, nil, nil, map[string]*node{}, nil
	s.reverting, s.stopReason, s.bakeUntil = false, "", time.Time{}
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

func compareNodes(a, b *node) int {
	return cmp.Or(cmp.Compare(a.domain, b.domain), cmp.Compare(a.name, b.name))
}

func insertNode(xs []*node, n *node) []*node {
	i, found := slices.BinarySearchFunc(xs, n, compareNodes)
	if found {
		return xs
	}
	return slices.Insert(xs, i, n)
}

func removeNode(xs []*node, n *node) []*node {
	i, found := slices.BinarySearchFunc(xs, n, compareNodes)
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// snapshot copies the rollout record for an action, so that later decisions
// do not change what the loop writes.
func snapshot(r *sluicev1.Rollout) *sluicev1.Rollout { return proto.Clone(r).(*sluicev1.Rollout) }
