package rollout

import (
	"fmt"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Evidence-based bake (strategy.bakeChecks): the desired config of every
// node started carries contract.Plan.BakeChecksOf, and its agent, once the
// node is provisioned, re-runs its checks every interval and reports each
// pass (NodeStatus.bake_passes). The bake before the next stage is over
// when its time has passed and every node provisioned in the stage has
// passed at least bakeChecks re-runs; until then the next stage waits (the
// progress deadline still bounds it), the record's bakeChecksPassed saying
// the fewest any node has. A re-run that fails is reported Invalid on the
// node's target by its agent, which has put its last-good back: the node
// fails as if its apply had (counted, recorded, over budget reverts).
//
// The counts are inputs: a node's passes come from its status only. They
// are kept as a histogram of the stage's provisioned nodes by passes
// (capped at bakeChecks), so an event costs O(bakeChecks), not O(stage).
// After a takeover the stage in progress is not counted (its nodes were
// placed, not started, in this term): its bake is time only, as before bake
// checks; a failed re-run still fails its node. Every later stage is
// counted. Counting it too needs each node's stage in the stored state.

// evidence is the histogram of the stage in progress.
type evidence struct {
	stage int32 // the stage it counts (len(rollout.stages) when it began)
	hist  []int // hist[p]: provisioned nodes of the stage with p passes (p capped at want)
}

// evidenceReset starts a rollout placed in this term with no stage
// counted (see the package note on takeovers).
func (s *State) evidenceReset() {
	s.evid, s.evidWaiting = evidence{stage: -1}, false
	s.bakeSpec = s.plan.BakeChecksOf()
}

// stageStarted begins the count for the stage openStage just began.
func (s *State) stageStarted() {
	s.evid.stage = int32(len(s.rollout.GetStages()))
	s.evid.hist = nil
	if w := s.plan.BakeChecks; w > 0 {
		s.evid.hist = make([]int, w+1)
	}
	s.noteLeast()
}

// joinedStage marks n, started now, as a node of the stage in progress,
// with no passes yet.
func (s *State) joinedStage(n *node) {
	n.stage, n.passes = s.evid.stage, 0
}

// counted reports whether n is in the histogram: provisioned in the stage
// in progress of a rollout with bake checks, and present. A node that left
// no longer counts (docs/rollouts.md, "Evidence-based bake"): away, it
// reports no re-runs, and waiting for it would hold the stage until the
// progress deadline (chaos seed 181: a node that left after it was
// provisioned, before its first pass, and the failing node of the next
// stage was never reached, so the rollout ended ABORTED, not ROLLED_BACK).
// Back, it counts again.
func (s *State) counted(n *node) bool {
	return s.evid.hist != nil && n.prog == progProvisioned && n.touched && n.present && n.stage == s.evid.stage
}

// setPresent sets whether n's presence lease is held, moving n into or out
// of the histogram (counted).
func (s *State) setPresent(n *node, present bool) {
	if n.present == present {
		return
	}
	was := s.counted(n)
	n.present = present
	switch is := s.counted(n); {
	case was && !is:
		s.evid.hist[s.bucket(n.passes)]--
	case is && !was:
		s.evid.hist[s.bucket(n.passes)]++
	default:
		return
	}
	s.noteLeast()
}

func (s *State) bucket(passes uint32) int { return min(int(passes), s.plan.BakeChecks) }

// evidenceMoved follows n's progress (setProg): into or out of the
// histogram (a node away is in it at no progress: setPresent).
func (s *State) evidenceMoved(n *node, from, to progress) {
	if s.evid.hist == nil || from == to || n.stage != s.evid.stage || !n.touched || !n.present {
		return
	}
	if from == progProvisioned {
		s.evid.hist[s.bucket(n.passes)]--
	}
	if to == progProvisioned {
		s.evid.hist[s.bucket(n.passes)]++
	}
	s.noteLeast()
}

// bakeReport takes what a status says of n's re-runs: its passes, or a
// failed re-run, which it handles (true: nothing else is to be done with
// the status).
func (s *State) bakeReport(n *node, st *sluicev1.NodeStatus, now time.Time) bool {
	r := s.rollout
	if r == nil || st.GetRollout() != r.GetId() || st.GetFingerprint() != n.target || !n.touched {
		return false
	}
	if p := st.GetBakePasses(); p != n.passes && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
		if s.counted(n) {
			s.evid.hist[s.bucket(n.passes)]--
			s.evid.hist[s.bucket(p)]++
			n.passes = p
			s.noteLeast()
		} else {
			n.passes = p
		}
	}
	if n.prog != progProvisioned || st.GetPhase() != sluicev1.NodePhase_NODE_PHASE_INVALID || s.reverting || s.stopReason != "" {
		return false
	}
	// Provisioned, and now Invalid on the same target: a re-run of its
	// checks failed while it baked, and its agent restored last-good.
	check := orDefault(st.GetFailedCheck(), "unknown check")
	why := fmt.Sprintf("a re-run of its checks failed while it baked, after %d passed: %s", n.passes, checkFailed(check, st.GetMessage()))
	s.setProg(n, progFailed)
	s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_INVALID, check, st.GetCheckOutput(), why)
	s.emit(s.nodeEvent(n, "NodeFailed", "node reported Invalid: "+why))
	s.recordReported(n.name, n.target, r.GetId(), r.GetRevision(), check, st.GetCheckOutput(), CauseCheckFailed, st.GetNodeFault(), now)
	s.overBudget(fmt.Sprintf("node %s: %s", n.name, why), now)
	return true
}

// least is the fewest passes any provisioned node of the stage has, and
// how many nodes have fewer than the strategy asks.
func (s *State) least() (least, short int) {
	least = s.plan.BakeChecks
	for p, k := range s.evid.hist {
		if k > 0 && p < least {
			least = p
		}
		if p < s.plan.BakeChecks {
			short += k
		}
	}
	return least, short
}

// noteLeast keeps the record's bakeChecksPassed.
func (s *State) noteLeast() {
	if s.evid.hist == nil || s.rollout == nil {
		return
	}
	if l, _ := s.least(); s.rollout.GetBakeChecksPassed() != uint32(l) {
		s.rollout.BakeChecksPassed = uint32(l)
		s.changed()
	}
}

// bakeEvidenceIn reports whether the stage's nodes have passed the re-runs
// the strategy asks for, once the bake's time is over; if not, it says so
// once (event RolloutWaitingForBakeChecks).
func (s *State) bakeEvidenceIn() bool {
	if s.evid.hist == nil {
		return true
	}
	least, short := s.least()
	if short == 0 {
		s.evidWaiting = false
		return true
	}
	if !s.evidWaiting {
		s.evidWaiting = true
		s.emit(s.rolloutEvent("RolloutWaitingForBakeChecks", fmt.Sprintf(
			"%s baked %s; waiting for %d node(s) to pass their re-run checks %d times (fewest so far: %d)",
			s.stageName(), s.plan.Bake, short, s.plan.BakeChecks, least)))
	}
	return false
}
