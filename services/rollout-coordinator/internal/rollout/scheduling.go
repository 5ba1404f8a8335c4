package rollout

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fill starts nodes while slots are free: revert writes when reverting,
// otherwise pending nodes in (failure domain, name) order within the
// current wave and domain, after any bake time.
func (s *State) fill(now time.Time) {
	if s.rollout == nil || s.holding() {
		return
	}
	if s.reverting || s.stopReason != "" {
		s.stopWaiting() // no wave will start
	}
	if s.reverting {
		s.fillRevert(now)
		return
	}
	if s.stopReason != "" {
		return
	}
	r := s.rollout
	for s.inFlight.len() < s.plan.MaxParallel && s.pending.len() > 0 {
		if s.baking() {
			if !s.bakeTimeOver(now) {
				break // its time runs, or a pause holds it (bake.go)
			}
			if !s.bakeEvidenceIn() {
				break // the stage's nodes have not passed their re-runs (bakechecks.go)
			}
			s.passBake()
		}
		n := s.pending.first()
		if why := n.cannotRead(n.target, s.bakeSpec, n.config); why != "" {
			s.skipUnreadable(n, why) // never written a config its agent cannot read
			continue
		}
		if s.held(n) {
			// n waits for its redundancy group, and so does every node
			// after it (pairs.go).
			s.waitForPair(n, now)
			break
		}
		if !s.alertsClear(now) {
			break // an alert gate has not said its alerts are quiet
		}
		boundary, what := s.boundary(n)
		if boundary {
			if s.inFlight.len() > 0 {
				break // finish the stage first
			}
			if s.plan.Bake > 0 && !s.baked && s.started > 0 {
				s.startBake(now, what)
				break
			}
			// Metric gates judge what the stages before changed: none
			// before the first.
			if !s.windowOpen(now, what) {
				// The gates are asked once the window opens: a verdict
				// from before a wait may be hours old by then.
				s.forgetGateAnswers()
				break
			}
			if s.started > 0 && !s.metricGatesPass(now, what) {
				break
			}
			s.closeStage(now)
			s.advance(n)
			s.openStage(now)
		} else if s.started == 0 && !s.windowOpen(now, "the first nodes") {
			break // a rollout without waves is one: it starts within a window too
		} else {
			s.enterDomain(n, false) // a value the stage has room for (domains.go)
		}
		s.gateWaitOver()
		// A bake counts for the stage boundary it came before; one taken
		// early for a redundancy group (pairs.go) does not stand in for it.
		s.stageStartsBaked()
		s.pairWait = ""
		s.pending.remove(n)
		s.started++
		s.setProg(n, progInFlight)
		// The pickup deadline starts when the write lands (Written), not
		// now: a write the control plane holds up is not the node's delay.
		n.writtenAt, n.ackAt, n.touched = time.Time{}, time.Time{}, true
		s.joinedStage(n)
		s.fly(n)
		d := s.shareDesired(desired{revision: s.intern(r.GetRevision()), rollout: s.intern(r.GetId()), fingerprint: n.target, config: n.config,
			op: opApply, deadline: stampOfDuration(durationpb.New(contract.OperationDeadline(s.plan.ApplyDeadline))), bake: s.bakeSpec})
		r.Counts.Attempted++
		var save *desired
		n.previous, save = s.lastGood(n, n.target)
		n.before = nil
		if n.previous == nil {
			n.before = s.ranBefore(n, r.GetId(), false)
		}
		n.desired = d
		s.do(WriteDesired{Desired: d.message(n.name), Backup: save.message(n.name)})
	}
}

// windowOpen reports whether the strategy's windows let a wave start now
// (what names it). While none is open the rollout waits, its clock held as
// during a pause (the progress deadline counts only time it could move):
// its record says why and until when, and an event says so once.
func (s *State) windowOpen(now time.Time, what string) bool {
	r := s.rollout
	open, next := contract.WindowsOpen(s.plan.Windows, now)
	var why string
	if frozen, until, by := contract.Frozen(slices.Collect(maps.Values(s.freezes)), now); frozen {
		// A freeze wins over any window: nothing starts within it.
		open, next = false, until
		why = fmt.Sprintf("frozen until %s: %s (freeze %s by %s)", until.UTC().Format(time.RFC3339), by.GetReason(), by.GetId(), cmp.Or(by.GetBy(), "?"))
	} else if !open {
		why = "waiting for the window " + contract.DescribeWindows(s.plan.Windows)
	}
	if open {
		if s.waitingWindow {
			s.waitingWindow = false
			r.Waiting, r.WaitingUntil = "", nil
			s.changed()
			s.emit(s.rolloutEvent("RolloutWindowOpened", fmt.Sprintf("no window or freeze holds it now: %s starts", what)))
		}
		return true
	}
	if !s.waitingWindow || r.GetWaiting() != why || !r.GetWaitingUntil().AsTime().Equal(next) {
		s.waitingWindow, s.gates.waiting = true, false // the window's line replaces a gate's
		r.Waiting, r.WaitingUntil = why, timestamppb.New(next)
		s.changed()
		s.emit(s.rolloutEvent("RolloutWaitingForWindow", fmt.Sprintf("%s: %s starts at %s at the earliest",
			why, what, next.UTC().Format(time.RFC3339))))
	}
	return false
}

// freezeChanged keeps the operators' freezes; the next wave start (fill)
// honours them.
func (s *State) freezeChanged(id string, f *sluicev1.Freeze) {
	if s.freezes == nil {
		s.freezes = map[string]*sluicev1.Freeze{}
	}
	if f == nil {
		delete(s.freezes, id)
		return
	}
	s.freezes[id] = f
}

// stopWaiting ends a wait for a window without a wave starting: the
// rollout stopped.
func (s *State) stopWaiting() {
	if !s.waitingWindow && !s.gates.waiting {
		return
	}
	s.waitingWindow, s.gates.waiting = false, false
	s.rollout.Waiting, s.rollout.WaitingUntil = "", nil
	s.changed()
}

// lastGood is what n goes back to if target is reverted, and the backup to
// save before writing target (nil: the backup key already holds it). Only a
// config the node has proven — its status reports it Provisioned — replaces
// the backup: a desired config that failed on the node, or that it had not
// finished when this write supersedes it, may not be what it runs (its agent
// falls back to its own last-good, which the backup key still holds). A
// proven config stays the node's last-good even when its fingerprint failed
// on another node (a rollout that partially failed leaves it in force here).
// A node with no status to go by is judged by the records alone
// (unreportedInForce): the absence of a report is not a report.
func (s *State) lastGood(n *node, target string) (revertTo, save *desired) {
	d := n.desired
	proven := n.status.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && n.status.GetFingerprint() == d.GetFingerprint()
	switch {
	case d == nil:
		return nil, nil
	case d.GetRevert():
		return d, nil // a revert writes the backup back: the key holds it
	case d.GetFingerprint() == target:
		return d, nil
	case !proven && n.backup != nil && !s.unreportedInForce(n, d):
		return n.backup, nil
	}
	// Proven; or the node never had a backup, and its desired config is the
	// best guess of what it runs; or it has no status and the records say
	// its desired config is its last-good.
	b := *d
	b.proven = proven
	n.backup = s.shareDesired(b)
	return n.backup, n.backup
}

// unreportedInForce reports whether n has no status to go by while its
// desired config d is of the revision in force and not known bad. A status
// key holding a value that is not well-formed is quarantined at intake, so a
// new term loads no status for the node until its agent writes one again (its
// next status write or resync). Until then the records are all there is, and
// they make d its last-good: the rollout that put d's revision in force ended,
// and d failing there would have been recorded invalid (I4); a cancelled d
// may never have run. Taking the absence for "d not proven" gave a node that
// had run d Provisioned its older backup, and a rollback left it on a config
// no longer in force (chaos seed 100, I1). The revision is compared by id:
// its content may be unreadable too (seed 100 had both). A d of another
// revision (a rollout rolled back while the node was away) leaves the backup.
func (s *State) unreportedInForce(n *node, d *desired) bool {
	return n.status == nil && !d.GetCancel() && s.invalid[d.GetFingerprint()] == nil &&
		d.GetRevision() != "" && d.GetRevision() == s.lastApplied.GetRevision()
}

// boundary reports whether starting n begins a new wave or failure domain.
func (s *State) boundary(n *node) (bool, string) {
	r := s.rollout
	if s.plan.Waves != nil {
		w := int(r.GetWave())
		if w == 0 || (w <= len(s.plan.Waves) && s.started >= s.plan.Waves[w-1]) {
			return true, fmt.Sprintf("wave %d", w+1)
		}
	}
	if s.domainBoundary(n) {
		return true, fmt.Sprintf("%s %s", s.plan.DomainKey, contract.DomainLabel(n.domain))
	}
	return false, ""
}

func (s *State) stageName() string {
	r := s.rollout
	if s.plan.Waves != nil {
		return fmt.Sprintf("wave %d", r.GetWave())
	}
	return fmt.Sprintf("%s %s", s.plan.DomainKey, s.domainLabels())
}

// advance moves to the wave n starts, and to a new failure-domain stage
// that begins with n's value.
func (s *State) advance(n *node) {
	r := s.rollout
	if s.plan.Waves != nil {
		w := int(r.GetWave())
		if w == 0 || (w < len(s.plan.Waves) && s.started >= s.plan.Waves[w-1]) {
			r.Wave++
			size := s.plan.Waves[r.Wave-1] - s.started
			s.changed()
			s.emit(s.rolloutEvent("WaveStarted", fmt.Sprintf("wave %d: up to %d nodes", r.Wave, size)))
		}
	}
	s.enterDomain(n, true)
}

// openStage starts the record of the wave or domain stage just entered.
func (s *State) openStage(now time.Time) {
	r := s.rollout
	r.Stages = append(r.Stages, &sluicev1.StageResult{Wave: r.GetWave(), Domain: r.GetDomain(), StartedAt: timestamppb.New(now),
		CountsAtStart: proto.Clone(r.GetCounts()).(*sluicev1.RolloutCounts), StartedBefore: uint32(s.started)})
	s.changed()
	s.stageStarted()
}

// closeStage ends the stage in progress, if any: every node of it has an
// outcome (a stage ends only with none in flight, or with the rollout).
func (s *State) closeStage(now time.Time) {
	r := s.rollout
	if len(r.GetStages()) == 0 {
		return
	}
	st := r.Stages[len(r.Stages)-1]
	if st.GetEndedAt() != nil {
		return
	}
	c, b := r.GetCounts(), st.GetCountsAtStart()
	diff := func(now, then uint32) uint32 { return now - min(now, then) }
	st.Nodes = diff(uint32(s.started), st.GetStartedBefore())
	st.Provisioned = diff(c.GetProvisioned(), b.GetProvisioned())
	st.Failed = diff(c.GetFailed(), b.GetFailed())
	st.TimedOut = diff(c.GetTimedOut(), b.GetTimedOut())
	st.Skipped = diff(c.GetSkipped(), b.GetSkipped())
	st.EndedAt = timestamppb.New(now)
	s.changed()
}
