package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Faults that make a node leave and come back at a moment the coordinator
// must treat specially (issue 22): while the rollout reverts, and while
// the control plane is paused. The plain agent-leave comes back after a
// fixed time, which almost never falls inside a revert or a pause.

// awaitKey polls key of kv (from the stream's leader) until gone says the
// answer is what it waits for (gone: the key is absent), for up to within.
// A read that fails is retried; false if the moment never came.
func (s *system) awaitKey(ctx context.Context, kv func() jetstream.KeyValue, key string, gone bool, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.leaderGet(rctx, kv(), key)
		cancel()
		if !unread(err) && errors.Is(err, jetstream.ErrKeyNotFound) == gone {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

func (s *system) nodesKV() jetstream.KeyValue   { return s.Env().Buckets.Nodes }
func (s *system) configsKV() jetstream.KeyValue { return s.Env().Buckets.NodeConfigs }

// leaveUntilRevert: ft.Node leaves once its applier ran the rollout's
// target, and comes back as soon as its presence expired and the rollout
// reverts. Revert applies wait at the gate (Scenario.RevertGate) until it
// is back, so the revert still runs: the coordinator must revert it
// (NodeJoinedRevert, then a revert), which the Revert check holds it to.
func (f *faults) leaveUntilRevert(ctx context.Context, ft Fault) {
	s := f.sys
	defer s.openGate()
	defer f.lock(ft.Node)()
	a := f.drv.changes[ft.Change]
	n := s.nodes[ft.Node]
	applied := func() bool {
		for _, ap := range n.history() {
			if ap.Rollout == a.id && !ap.Revert && ap.Err == "" {
				return true
			}
		}
		return false
	}
	for !applied() {
		if r, _ := s.rollout(ctx, a.id); r != nil && (ended(r) || r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING) {
			s.log.add("%s: the rollout reverts or ended before %s applied its target; not left", ft, ft.Node)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.halt(ft.Node)
	f.drv.left(ft.Node)
	s.log.add("%s: stopped after it applied the target", ft)
	if !s.awaitKey(ctx, s.nodesKV, ft.Node, true, 3*s.sc.NodeLease+5*time.Second) {
		s.log.add("%s: its presence did not expire", ft.Kind)
	}
	var reverting bool
	if _, err := s.waitPhase(ctx, a.id, 30*time.Second, func(r *sluicev1.Rollout) bool {
		reverting = r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
		return reverting || ended(r)
	}); err != nil {
		s.log.add("%s: %v", ft.Kind, err)
	}
	s.startAgent(ft.Node)
	s.log.add("%s %s: presence expired; started again (rollout reverting: %v)", ft.Kind, ft.Node, reverting)
	// Let the coordinator see it come back before the revert may end.
	if s.awaitKey(ctx, s.nodesKV, ft.Node, false, 5*time.Second) {
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
	s.log.add("%s: reverts may go on", ft.Kind)
}

// pauseAway runs a pause-plane fault with a node leaving or coming back
// inside the checked window:
//   - after an apply: once every instance acknowledged, the nodes whose
//     forward operations their (paused) agents hold leave; their presence
//     expires within the hold, and their skips free slots (or end a wave)
//     in the rollout, which must stay empty while paused. A coordinator
//     that holds the pause has started none after it saw it, so there are
//     seldom any; one that ignores it fills its slots. They start again
//     after the resume.
//   - when the last rollout ended: ft.Node leaves until the reaper deleted
//     its keys, then comes back as a joiner once every instance
//     acknowledged the pause: under joiners freeze it gets nothing until
//     the resume.
func (f *faults) pauseAway(ctx context.Context, ft Fault) {
	s := f.sys
	var h pauseHooks
	switch ft.Trigger {
	case Ended:
		defer f.lock(ft.Node)()
		s.halt(ft.Node)
		f.drv.left(ft.Node)
		s.log.add("%s: stopped %s", ft, ft.Node)
		if !s.awaitKey(ctx, s.configsKV, contract.DesiredKey(ft.Node), true, 4*s.sc.NodeLease+10*time.Second) {
			s.log.add("%s: %s's desired key was not reaped; it comes back without pause", ft.Kind, ft.Node)
			s.startAgent(ft.Node)
			return
		}
		s.log.add("%s: %s reaped", ft.Kind, ft.Node)
		h.acked = func() {
			s.startAgent(ft.Node)
			s.log.add("%s: %s started again while paused", ft.Kind, ft.Node)
		}
		h.resumed = func() {}
	default:
		var who []string
		h.acked = func() {
			who = f.heldInFlight(ctx, ft)
			if len(who) == 0 {
				s.log.add("%s: no healthy node of the rollout is held in flight; none leaves", ft.Kind)
				return
			}
			for _, n := range who {
				s.halt(n)
				f.drv.left(n)
			}
			s.log.add("%s: stopped %v (their forward operations held by the pause)", ft.Kind, who)
		}
		h.resumed = func() {
			for _, n := range who {
				s.startAgent(n)
				f.unlock(n)
			}
			if len(who) > 0 {
				s.log.add("%s: %v started again", ft.Kind, who)
			}
		}
	}
	f.pausePlane(ctx, ft, h)
}

// heldInFlight lists the nodes that the change does not make fail, whose
// desired config is the rollout's forward target and whose applier has not
// run it, and locks each for the caller (the faults on one node take
// turns: one held by another fault is passed over). All of them leave, so
// that a wave whose nodes they are ends (skipped) and the next one would
// start.
func (f *faults) heldInFlight(ctx context.Context, ft Fault) []string {
	s := f.sys
	a := f.drv.changes[ft.Change]
	var out []string
	for _, name := range sortedKeys(s.nodes) {
		if s.sc.Changes[ft.Change].Behaviour[name] != Healthy || !s.running(name) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		b, err := s.leaderGet(rctx, s.configsKV(), contract.DesiredKey(name))
		cancel()
		d := &sluicev1.DesiredConfig{}
		if err != nil || store.Decode(contract.BucketNodeConfigs, contract.DesiredKey(name), b, d) != nil {
			continue
		}
		if d.GetRollout() != a.id || d.GetRevert() || d.GetCancel() {
			continue
		}
		ran := false
		for _, ap := range s.nodes[name].history() {
			ran = ran || ap.Fingerprint == d.GetFingerprint()
		}
		if ran || !f.tryLock(name) {
			continue
		}
		out = append(out, name)
	}
	return out
}
