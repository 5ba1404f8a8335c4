package rollout

import (
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// refuseKnownBad checks every target the rollout would write against the
// invalid set before any node is touched.
func (s *State) refuseKnownBad(now time.Time) {
	var bad []*node
	for _, n := range s.pending.sorted() { // in start order: the first is named
		// A fingerprint this very rollout recorded (a failure within its
		// budget, before a restart) does not stop it: it would not have
		// stopped it without the restart either.
		if f := s.invalid[n.target]; f != nil && f.GetRollout() != s.rollout.GetId() {
			bad = append(bad, n)
		}
	}
	if len(bad) == 0 {
		return
	}
	if s.plan.RetryInvalid {
		seen := map[string]bool{}
		for _, n := range bad {
			if seen[n.target] {
				continue
			}
			seen[n.target] = true
			s.forgive(s.invalid[n.target], &sluicev1.Forgiveness{By: "rollout " + s.rollout.GetId(),
				Reason: "retried on purpose (retryInvalid)", At: timestamppb.New(now)})
		}
		return
	}
	for _, n := range bad {
		f := s.invalid[n.target]
		s.pending.remove(n)
		s.setProg(n, progRefused)
		s.recordOutcome(n, sluicev1.NodeResult_NODE_RESULT_REFUSED, f.GetCheck(), f.GetOutput(),
			fmt.Sprintf("target fingerprint %s is recorded invalid (%s on %s in rollout %s)",
				render.Short(n.target), orDefault(f.GetCause(), CauseCheckFailed), f.GetNode(), f.GetRollout()))
	}
	s.dropPending()
	f := s.invalid[bad[0].target]
	s.stopReason = fmt.Sprintf("refused before touching any node: %d node(s) would get a fingerprint recorded invalid; first %s → %s, "+
		"which failed on %s (%s, check %s: %s) in rollout %s; fix the intents, or apply with --retry-invalid to try it again on purpose",
		len(bad), bad[0].name, render.Short(bad[0].target), f.GetNode(), orDefault(f.GetCause(), CauseCheckFailed),
		f.GetCheck(), truncate(f.GetOutput(), 200), f.GetRollout())
	// Nodes in flight from before a restart are left to finish; maybeFinish ends it.
}

// configureStragglers gives every present node outside a rollout the last
// applied revision's config, e.g. nodes that joined while no rollout ran.
func (s *State) configureStragglers() {
	if s.rollout != nil {
		return
	}
	for _, name := range s.sortedNodes() {
		s.configureStraggler(s.nodes[name], "node is outside any rollout")
	}
}

// configureStraggler gives n the configuration in force (the last applied
// revision's), with an event, unless it already has it or it is known bad.
func (s *State) configureStraggler(n *node, whyStraggler string) {
	if !n.present || s.joinerWaits(n) {
		return
	}
	if s.lastAppliedRev == nil {
		s.noteUnrenderable(n, whyStraggler)
		return
	}
	fp, cfg := s.renderFor(s.lastAppliedRev, n)
	if (n.desired.GetFingerprint() == fp && !n.desired.GetCancel()) || s.invalid[fp] != nil {
		return
	}
	if why := n.cannotRead(fp, nil, cfg); why != "" {
		s.emit(&sluicev1.Event{Kind: contract.KindNode, Id: n.name, Type: "NodeIncompatible", Node: n.name,
			Revision: s.lastApplied.GetRevision(), Rollout: s.lastApplied.GetRollout(), Fingerprint: fp,
			Reason: why + "; " + whyStraggler + ", it is not configured: it keeps the config in force until its agent is upgraded"})
		return
	}
	d := &desired{revision: s.intern(s.lastApplied.GetRevision()), rollout: s.intern(s.lastApplied.GetRollout()),
		fingerprint: fp, config: cfg, op: opConfigure, deadline: stampOfDuration(durationpb.New(contract.OperationDeadline(DefaultApplyDeadline)))}
	_, save := s.lastGood(n, fp)
	n.desired = d
	s.do(WriteDesired{Desired: d.message(n.name), Backup: save.message(n.name), Events: []*sluicev1.Event{{
		Kind: contract.KindNode, Id: n.name, Type: "NodeConfigured", Node: n.name,
		Revision: d.revision, Rollout: d.rollout, Fingerprint: fp,
		Reason: whyStraggler + " and differs from the configuration in force; it gets the last applied revision " + render.Short(d.revision),
	}}})
}

// noteUnrenderable says, once per node until it leaves or the revision in
// force can be read again, that n cannot be given the configuration in
// force: a revision is in force but cannot be read (garbage over it, no
// head's intents to rewrite it from), so its config for n cannot be
// rendered, and n keeps what it runs (its agent's last-good). Only a node
// that needs a write is named: one whose desired config is not of the
// revision in force (a node that came back after its keys were reaped, one
// whose revert was deferred until it came back: chaos seed 230 on virtual
// time). It used to stay silent, so nothing said why the node ran a
// rolled-back config.
func (s *State) noteUnrenderable(n *node, whyStraggler string) {
	rev := s.lastApplied.GetRevision()
	if rev == "" || (n.desired != nil && n.desired.revision == rev) || s.unrenderable[n.name] {
		return
	}
	if s.unrenderable == nil {
		s.unrenderable = map[string]bool{}
	}
	s.unrenderable[n.name] = true
	s.emit(&sluicev1.Event{Kind: contract.KindNode, Id: n.name, Type: "NodeNotConfigured", Node: n.name,
		Revision: rev, Rollout: s.lastApplied.GetRollout(),
		Reason: fmt.Sprintf("%s, but the revision in force %s cannot be read (unreadable or no longer stored), so its config for this node cannot be rendered: "+
			"the node keeps what it runs (%s) until that revision is written again or another one rolls out (sluice apply, sluice rollout undo --to-revision)",
			whyStraggler, render.Short(rev), runsOrUnknown(n))})
}

// runsOrUnknown names the fingerprint n's agent says it runs.
func runsOrUnknown(n *node) string {
	if fp := n.inForce().fingerprint; fp != "" {
		return render.Short(fp)
	}
	return "its agent's last-good"
}

func cloneInvalid(f *sluicev1.InvalidFingerprint) *sluicev1.InvalidFingerprint {
	return proto.Clone(f).(*sluicev1.InvalidFingerprint)
}

// forgiveRequested takes an operator's request to forgive a fingerprint:
// done once, and only for the record the operator saw (a failure recorded
// again later stands).
func (s *State) forgiveRequested(req *sluicev1.ForgiveRequest, now time.Time) {
	f := s.invalid[req.GetFingerprint()]
	switch {
	case f == nil:
		return // not known bad, or forgiven already
	case req.GetRecordedAt() != nil && !f.GetTime().AsTime().Equal(req.GetRecordedAt().AsTime()):
		return // recorded again since the operator looked
	case req.GetRecordedAt() == nil && f.GetTime().AsTime().After(req.GetAt().AsTime()):
		return
	}
	s.forgive(f, &sluicev1.Forgiveness{By: orDefault(req.GetBy(), "an operator"), Reason: req.GetReason(), At: req.GetAt()})
}

// forgive takes f out of the invalid set: its record is rewritten with fg,
// and an Invalid report the agents still carry from before fg does not
// record it again.
func (s *State) forgive(f *sluicev1.InvalidFingerprint, fg *sluicev1.Forgiveness) {
	fp := f.GetFingerprint()
	delete(s.invalid, fp)
	s.forgiven[fp] = fg.GetAt().AsTime()
	rec := cloneInvalid(f)
	rec.Forgiven = fg
	s.do(ForgiveInvalid{Fingerprint: rec})
	ev := &sluicev1.Event{
		Kind: contract.KindFingerprint, Id: fp, Type: "FingerprintForgiven", Fingerprint: fp,
		Rollout: f.GetRollout(), Revision: f.GetRevision(), Node: f.GetNode(),
		Reason: fmt.Sprintf("forgiven by %s (%s); it was recorded invalid (%s) on %s by check %s: %s",
			fg.GetBy(), orDefault(fg.GetReason(), "no reason given"), orDefault(f.GetCause(), CauseCheckFailed),
			f.GetNode(), f.GetCheck(), truncate(f.GetOutput(), 200)),
	}
	s.emit(ev)
}

// expireInvalid forgives, on behalf of the expiry, every fingerprint
// recorded invalid longer than invalidExpiry ago (off when 0).
func (s *State) expireInvalid(now time.Time) {
	if s.invalidExpiry <= 0 {
		return
	}
	var fps []string
	for fp, f := range s.invalid {
		if f.GetTime() != nil && now.Sub(f.GetTime().AsTime()) > s.invalidExpiry {
			fps = append(fps, fp)
		}
	}
	sort.Strings(fps)
	for _, fp := range fps {
		s.forgive(s.invalid[fp], &sluicev1.Forgiveness{By: "expiry",
			Reason: fmt.Sprintf("recorded invalid more than %s ago (the coordinator's --invalid-expiry)", s.invalidExpiry), At: timestamppb.New(now)})
	}
}
