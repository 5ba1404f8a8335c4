package rollout

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// maybeFinish ends the active rollout once nothing is in flight and nothing
// more will start.
func (s *State) maybeFinish(now time.Time) {
	r := s.rollout
	if r == nil || s.inFlight.len() > 0 {
		return
	}
	c := r.GetCounts()
	if s.reverting {
		if s.revertQ.len() > 0 {
			return
		}
		reason := fmt.Sprintf("%s; %d node(s) reverted to their backups", s.stopReason, c.GetReverted())
		if n := c.GetRevertFailed(); n > 0 {
			reason += fmt.Sprintf(", %d could not be reverted (see failures)", n)
		}
		phase := sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK
		if r.GetAbortedBy() != nil {
			phase = sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED // an operator stopped it, not its failures
		}
		s.finish(phase, reason, now)
		return
	}
	if s.stopReason != "" {
		s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, s.stopReason, now)
		return
	}
	if s.pending.len() > 0 || !s.endGates(now) {
		return
	}
	if f := s.failures(); f > 0 {
		s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED, fmt.Sprintf(
			"%d node(s) failed within the failure budget of %d (first: %s); %d provisioned, %d skipped",
			f, s.plan.Budget, describeFailure(r.GetFailures()), c.GetProvisioned(), c.GetSkipped()), now)
		return
	}
	if left := int(c.GetSkipped()) + s.leftUnled; c.GetProvisioned() == 0 && left > 0 {
		// Nothing of the target was proven: every node it was for left
		// before it was configured (a NATS outage longer than the node
		// lease lapses every presence). Succeeded would put the target in
		// force, and every returning node would get it at once, not wave
		// by wave (a virtual-time chaos seed). It ends Aborted: the config
		// in force stays, and `sluice rollout retry` rolls it out again.
		why := fmt.Sprintf("the %d node(s) it was for left before they were configured (presence lapsed)", left)
		if inc := int(c.GetIncompatible()); inc > 0 {
			why = fmt.Sprintf("of the %d node(s) it was for, %d left before they were configured (presence lapsed) and %d have an agent that cannot read it (upgrade them)",
				left, left-inc, inc)
		}
		s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_ABORTED, fmt.Sprintf(
			"no node was provisioned: %s, so nothing of its target is proven and it is not put in force; sluice rollout retry rolls it out again", why), now)
		return
	}
	reason := fmt.Sprintf("all %d nodes provisioned", c.GetProvisioned())
	if c.GetSkipped() > 0 {
		reason = fmt.Sprintf("%d nodes provisioned, %d skipped (%s)", c.GetProvisioned(), c.GetSkipped(), skippedWhy(c))
	}
	s.finish(sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED, reason, now)
}

// skippedWhy says why a rollout's nodes were skipped.
func skippedWhy(c *sluicev1.RolloutCounts) string {
	inc, left := c.GetIncompatible(), c.GetSkipped()-c.GetIncompatible()
	switch {
	case inc == 0:
		return "left during the rollout"
	case left == 0:
		return "their agent cannot read the config: upgrade them"
	}
	return fmt.Sprintf("%d left during the rollout, %d have an agent that cannot read the config: upgrade them", left, inc)
}

func describeFailure(fs []*sluicev1.NodeOutcome) string {
	if len(fs) == 0 {
		return "none listed"
	}
	f := fs[0]
	return fmt.Sprintf("%s: %s", f.GetNode(), checkFailed(orDefault(f.GetFailedCheck(), "unknown check"), f.GetMessage()))
}

// finish ends the active rollout in phase. Its one FinishRollout action
// carries the terminal record and, when the revision is in force, the new
// last-applied reference. Nodes outside the rollout then get the revision in force.
func (s *State) finish(phase sluicev1.RolloutPhase, reason string, now time.Time) {
	r := s.rollout
	s.closeStage(now)
	r.Phase, r.Reason, r.FinishedAt = phase, reason, timestamppb.New(now)
	s.endBake()
	r.Waiting, r.WaitingUntil = "", nil
	r.LeaderTime = durationpb.New(s.elapsed(now))
	fin := FinishRollout{Rollout: snapshot(r), ClearActive: r.GetId()}
	if contract.InForce(phase) {
		s.lastApplied = refOf(r, timestamppb.New(now))
		s.lastAppliedRev, s.unrenderable = s.rolloutRev, nil
		fin.LastApplied = proto.Clone(s.lastApplied).(*sluicev1.RolloutRef)
	}
	s.do(fin)
	s.emit(s.rolloutEvent("Rollout"+phaseWord(phase), reason))
	for _, n := range s.nodes {
		n.prog, n.rev, n.target, n.config, n.previous, n.touched = progNone, revNone, "", nil, nil, false
		n.before = nil
	}
	s.rollout, s.rolloutRev = nil, nil
	s.forgetUnseen(nil)
	s.pending.clear()
	s.inFlight.reset()
	s.revertQ.clear()
	s.forgetGroups()
	s.forgetShared()
	s.reverting, s.stopReason, s.bakeUntil, s.dirty, s.waitingWindow = false, "", time.Time{}, false, false
	s.leftUnled = 0
	s.gates = gateState{watched: s.gates.watched}
	if h, rev := s.next, s.nextRev; h != nil {
		// The waiting head starts now; it places every node.
		s.next, s.nextRev = nil, nil
		s.start(h, rev, now)
		return
	}
	s.configureStragglers()
}

func phaseWord(p sluicev1.RolloutPhase) string {
	w := strings.TrimPrefix(p.String(), "ROLLOUT_PHASE_")
	parts := strings.Split(strings.ToLower(w), "_")
	for i, x := range parts {
		parts[i] = strings.ToUpper(x[:1]) + x[1:]
	}
	return strings.Join(parts, "")
}

func (s *State) rolloutEvent(typ, reason string) *sluicev1.Event {
	r := s.rollout
	return &sluicev1.Event{Kind: contract.KindRollout, Id: r.GetId(), Type: typ, Reason: reason,
		Rollout: r.GetId(), Revision: r.GetRevision()}
}

func (s *State) nodeEvent(n *node, typ, reason string) *sluicev1.Event {
	r := s.rollout
	return &sluicev1.Event{Kind: contract.KindNode, Id: n.name, Type: typ, Reason: reason, Node: n.name,
		Rollout: r.GetId(), Revision: r.GetRevision(), Fingerprint: n.target}
}

// DefaultRetention is how many ended rollout records are kept.
const DefaultRetention = 100

// Prune chooses the ended rollout records to delete: all but the newest
// keep (ids are "<generation>-<revision>": the newest have the highest
// generation), never one named in protect (active, last-applied) — a
// protected older record is kept besides — nor a running rollout's. It is
// pure: the loop lists the records and deletes what it returns.
func Prune(records []*sluicev1.Rollout, keep int, protect ...string) []string {
	var ended []*sluicev1.Rollout
	for _, r := range records {
		if contract.Terminal(r.GetPhase()) {
			ended = append(ended, r)
		}
	}
	if keep < 0 || len(ended) <= keep {
		return nil
	}
	slices.SortFunc(ended, func(a, b *sluicev1.Rollout) int {
		if c := cmp.Compare(b.GetGeneration(), a.GetGeneration()); c != 0 {
			return c
		}
		return strings.Compare(b.GetId(), a.GetId())
	})
	var out []string
	for _, r := range ended[keep:] {
		if !slices.Contains(protect, r.GetId()) {
			out = append(out, r.GetId())
		}
	}
	slices.Sort(out)
	return out
}
