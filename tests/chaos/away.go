package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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
			if ap.Rollout == a.id() && !ap.Revert && ap.Err == "" {
				return true
			}
		}
		return false
	}
	for !applied() {
		if r, _ := s.rollout(ctx, a.id()); r != nil && (ended(r) || r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING) {
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
	f.backWhileReverting(ctx, ft, a.id(), "presence expired; ")
}

// backWhileReverting starts ft.Node's agent again once rollout id reverts
// (or ended), and lets the coordinator see it come back before the revert
// may end (the caller opens the gate then). It returns when the agent
// started and whether the rollout was reverting.
func (f *faults) backWhileReverting(ctx context.Context, ft Fault, id, why string) (time.Time, bool) {
	s := f.sys
	var reverting bool
	if _, err := s.waitPhase(ctx, id, 30*time.Second, func(r *sluicev1.Rollout) bool {
		reverting = r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING
		return reverting || ended(r)
	}); err != nil {
		s.log.add("%s: %v", ft.Kind, err)
	}
	at := time.Now()
	s.startAgent(ft.Node)
	s.log.add("%s %s: %sstarted again (rollout %s reverting: %v)", ft.Kind, ft.Node, why, id, reverting)
	if s.awaitKey(ctx, s.nodesKV, ft.Node, false, 5*time.Second) {
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
	s.log.add("%s: reverts may go on", ft.Kind)
	return at, reverting
}

// joinDuringRevert: ft.Node leaves as the rollout of change ft.Change
// ended, the next change is applied once its presence expired (its rollout
// does not count it), and it comes back while that rollout reverts. Revert
// applies wait at the gate (Scenario.RevertGate) until it is back, so the
// revert still runs: the coordinator must give it the config in force, never
// the rolled-back target (JoinedRevert).
func (f *faults) joinDuringRevert(ctx context.Context, ft Fault) {
	s := f.sys
	next := f.drv.holdFor(ft.Change + 1)
	defer next.release()
	defer s.openGate()
	defer f.lock(ft.Node)()
	s.halt(ft.Node)
	f.drv.left(ft.Node)
	s.log.add("%s: stopped %s", ft, ft.Node)
	if !s.awaitKey(ctx, s.nodesKV, ft.Node, true, 3*s.sc.NodeLease+5*time.Second) {
		s.log.add("%s: its presence did not expire", ft.Kind)
	}
	next.release()
	a := f.drv.changes[ft.Change+1]
	select {
	case <-ctx.Done():
		return
	case <-a.done:
	}
	if at, reverting := f.backWhileReverting(ctx, ft, a.id(), ""); reverting {
		f.drv.joined(Joiner{Node: ft.Node, Rollout: a.id(), At: at})
	}
}

// pauseAwayIdle is how long a pause-away after an apply holds the pause
// when no node of the rollout is held in flight (none leaves).
const pauseAwayIdle = 500 * time.Millisecond

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
		if !f.inForceReadable(ctx, f.drv.changes[ft.Change].revision) {
			// Nobody could render a reaped node's config in force: it would
			// wait for a rewrite of its revision that never comes.
			s.log.add("%s: the revision in force holds garbage (garbage-value); %s does not leave", ft, ft.Node)
			return
		}
		s.halt(ft.Node)
		f.drv.left(ft.Node)
		s.log.add("%s: stopped %s", ft, ft.Node)
		if !s.awaitKey(ctx, s.configsKV, contract.DesiredKey(ft.Node), true, 4*s.sc.NodeLease+10*time.Second) {
			s.log.add("%s: %s's desired key was not reaped; it comes back without pause", ft.Kind, ft.Node)
			s.startAgent(ft.Node)
			return
		}
		s.log.add("%s: %s reaped", ft.Kind, ft.Node)
		h.acked = func() time.Duration {
			s.startAgent(ft.Node)
			// The hold (ft.Down) counts from its registration.
			registered := s.awaitKey(ctx, s.nodesKV, ft.Node, false, 5*time.Second)
			s.log.add("%s: %s started again while paused (registered: %v)", ft.Kind, ft.Node, registered)
			return 0
		}
		h.resumed = func() {}
	default:
		var who []string
		h.acked = func() time.Duration {
			who = f.heldInFlight(ctx, ft)
			if len(who) == 0 {
				// No presence to expire inside the window: it is checked
				// as briefly as a pause-plane's, not past a node lease.
				s.log.add("%s: no healthy node of the rollout is held in flight; none leaves", ft.Kind)
				return pauseAwayIdle
			}
			for _, n := range who {
				s.halt(n)
				f.drv.left(n)
			}
			s.log.add("%s: stopped %v (their forward operations held by the pause)", ft.Kind, who)
			return 0
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

// inForceReadable reports whether the revision in force (rollouts/
// last-applied's) and that pointer are readable, as far as the harness
// can tell (a read that keeps failing counts as unreadable), and so is
// the revision of the rollout that just ended.
func (f *faults) inForceReadable(ctx context.Context, ended string) bool {
	s := f.sys
	ok := false
	readable := func(ctx context.Context, kv jetstream.KeyValue, key string, v proto.Message) (bool, error) {
		b, err := s.leaderGet(ctx, kv, key)
		if unread(err) {
			return false, err
		}
		// Raw: readRest would give a spoiled key its owner's value before.
		return err == nil && store.Decode(kv.Bucket(), key, b, v) == nil, nil
	}
	err := retry(ctx, func(ctx context.Context) error {
		b := s.Env().Buckets
		ref := &sluicev1.RolloutRef{}
		good, err := readable(ctx, b.Rollouts, contract.KeyLastApplied, ref)
		if err != nil || !good {
			return err
		}
		// The rollout that just ended may not be last-applied yet: both.
		ok = true
		for _, rev := range []string{ref.GetRevision(), ended} {
			good, err := readable(ctx, b.Revisions, rev, &sluicev1.Revision{})
			if err != nil {
				return err
			}
			ok = ok && good
		}
		return nil
	})
	return err == nil && ok
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
		if d.GetRollout() != a.id() || d.GetRevert() || d.GetCancel() {
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

// staleDesired lands a deposed leader's desired config at a node, as a
// coordinator whose writes carried no fence could (I6 is about the fence;
// this is the agent's own epoch check behind it): it stops the leader
// right after change ft.Change's apply (the rollout's writes then carry a
// higher epoch), waits until the last rollout ended, and writes over one
// node's desired key an earlier desired config of that node of a lower
// epoch and another config (compare-and-set on the key's revision). It is
// recorded as a spoil (Stale): the checker judges the node by the
// coordinator's last write there, so a node that applied the stale config
// breaks I1, and I6 passes over the harness's write.
func (f *faults) staleDesired(ctx context.Context, ft Fault) {
	s := f.sys
	func() {
		defer f.lock("coordinators")()
		name, holder := f.stopLeader(ctx, ft)
		s.log.add("%s: stopped %s for a new term (lease holder was %q)", ft, name, holder)
		select {
		case <-ctx.Done():
		case <-time.After(ft.Down):
		}
		s.startCoordinator(name)
	}()
	last := f.drv.changes[len(f.drv.changes)-1]
	select {
	case <-ctx.Done():
		return
	case <-last.done:
	}
	if ok, err := s.waitPhase(ctx, last.id(), 60*time.Second, ended); !ok || err != nil {
		s.log.add("%s: the last rollout did not end (%v); nothing written", ft.Kind, err)
		return
	}
	earlier := map[string][]*sluicev1.DesiredConfig{} // node → its desired configs, as written
	for _, w := range f.watch.snapshot(contract.BucketNodeConfigs) {
		if _, which, ok := contract.NodeOfConfigKey(w.Key); ok && which == "desired" && w.Desired != nil && !w.Desired.GetRevert() && !w.Desired.GetCancel() {
			earlier[w.Desired.GetNode()] = append(earlier[w.Desired.GetNode()], w.Desired)
		}
	}
	kv := s.configsKV()
	for _, name := range sortedKeys(s.nodes) {
		key := contract.DesiredKey(name)
		var cur *sluicev1.DesiredConfig
		var rev uint64
		err := retry(ctx, func(ctx context.Context) error {
			m, err := s.leaderMsg(ctx, kv, map[string]any{"last_by_subj": kvSubject(kv, key)})
			if err != nil || m.deleted {
				return err
			}
			d := &sluicev1.DesiredConfig{}
			if store.Decode(contract.BucketNodeConfigs, key, m.data, d) == nil {
				cur, rev = d, m.seq
			}
			return nil
		})
		if err != nil || cur == nil || !s.running(name) {
			continue
		}
		for _, old := range earlier[name] {
			if old.GetLeaderEpoch() == 0 || old.GetLeaderEpoch() >= cur.GetLeaderEpoch() || old.GetFingerprint() == cur.GetFingerprint() {
				continue
			}
			b, err := store.Marshal(old)
			if err != nil {
				s.log.add("%s: %v", ft.Kind, err)
				return
			}
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			nrev, err := kv.Update(wctx, key, b, rev)
			cancel()
			if err != nil {
				s.log.add("%s: write %s: %v (nothing written)", ft.Kind, key, err)
				return
			}
			s.spoiled.add(Spoil{Bucket: contract.BucketNodeConfigs, Key: key, Revision: nrev, At: time.Now(), Stale: true, Before: cur,
				What: fmt.Sprintf("stale: %s of rollout %s, leader epoch %d (the key's was %d)", short(old.GetFingerprint()), old.GetRollout(), old.GetLeaderEpoch(), cur.GetLeaderEpoch())})
			s.log.add("%s: wrote %s's desired config %s of epoch %d over its %s of epoch %d", ft.Kind, name,
				short(old.GetFingerprint()), old.GetLeaderEpoch(), short(cur.GetFingerprint()), cur.GetLeaderEpoch())
			// Its agent reads it (republished) within moments; at rest is judged after.
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			return
		}
	}
	s.log.add("%s: no node has an earlier desired config of a lower epoch; nothing written", ft.Kind)
}

// awayPastGrace: once a node applied the target of change ft.Change's
// rollout, the harness pauses the rollout (as `sluice rollout pause`
// does), so that it stays active, and stops that node — ft.Node if it
// applied the target, else the first that did, in name order —; the node
// stays away until its presence expired and the reaper's grace and one
// interval of its passes more went by, then the rollout is resumed and the
// node started again. The reaper must keep every key of a node the active rollout
// references (I5): the node comes back to the rollout that wrote its
// desired config. Choosing the node when the pause lands makes the fault
// fire whenever the rollout has not ended by then.
func (f *faults) awayPastGrace(ctx context.Context, ft Fault) {
	s := f.sys
	a := f.drv.changes[ft.Change]
	appliedTarget := func(name string) bool {
		for _, ap := range s.nodes[name].history() {
			if ap.Rollout == a.id() && !ap.Revert && ap.Err == "" {
				return true
			}
		}
		return false
	}
	// The node: ft.Node if it applied the target and runs, else the first
	// in name order that did; "" while none did.
	pick := func() string {
		if appliedTarget(ft.Node) && s.running(ft.Node) {
			return ft.Node
		}
		for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
			if appliedTarget(name) && s.running(name) {
				return name
			}
		}
		return ""
	}
	for pick() == "" {
		if r, _ := s.rollout(ctx, a.id()); r != nil && ended(r) {
			s.log.add("%s: the rollout ended before a node applied its target; none left", ft)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The rollout paused is the one resumed: the driver may follow the
	// change to a head the configurator wrote again meanwhile (a.id then
	// names that rollout), and resuming it instead left this one paused
	// for good (seed 75: 3-… stayed PROGRESSING, 14-… queued behind it).
	pausedID := a.id()
	if !f.pauseRollout(ctx, ft, pausedID, true) {
		return
	}
	node := pick()
	defer f.lock(node)()
	if !s.halt(node) { // another fault stopped it meanwhile, and starts it again
		s.log.add("%s: %s was stopped by another fault; none left", ft, node)
		f.pauseRollout(ctx, ft, pausedID, false)
		return
	}
	f.drv.left(node)
	s.log.add("%s: stopped %s after it applied the target, its rollout paused", ft, node)
	if !s.awaitKey(ctx, s.nodesKV, node, true, 3*s.sc.NodeLease+5*time.Second) {
		s.log.add("%s: %s's presence did not expire", ft.Kind, node)
	}
	// The harness's reaper has a grace of one node lease and passes when
	// the first absence it timed passes it (and every reaperEvery): past
	// this, a reaper that ignored the active rollout has deleted the node's
	// keys.
	select {
	case <-ctx.Done():
	case <-time.After(s.sc.NodeLease + reaperEvery + 500*time.Millisecond):
	}
	f.pauseRollout(ctx, ft, pausedID, false)
	s.startAgent(node)
	s.log.add("%s %s: started again, its rollout resumed", ft.Kind, node)
}

// pauseRollout writes control/pause.<id> as `sluice rollout pause` (paused)
// and `resume` do. It reports false, having written nothing, when pausing a
// rollout that already ended.
func (f *faults) pauseRollout(ctx context.Context, ft Fault, id string, paused bool) bool {
	s := f.sys
	reqs := store.New(s.Env().Buckets.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	key := contract.RolloutPauseKey(id)
	for ctx.Err() == nil {
		if r, _ := s.rollout(ctx, id); paused && r != nil && ended(r) {
			s.log.add("%s: rollout %s ended before it could be paused; no node left", ft, id)
			return false
		}
		want := &sluicev1.PauseRequest{Paused: paused, Rollout: id, By: "chaos", Reason: string(ft.Kind), At: timestamppb.Now()}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := reqs.Mutate(wctx, key, func(cur *sluicev1.PauseRequest) (*sluicev1.PauseRequest, error) {
			want.Generation = cur.GetGeneration() + 1
			return want, nil
		})
		if errors.Is(err, store.ErrUndecodable) { // garbage over the key: written over at its revision
			var cur store.Entry[*sluicev1.PauseRequest]
			if cur, err = reqs.Get(wctx, key); errors.Is(err, store.ErrUndecodable) {
				want.Generation = cur.Revision + 1
				_, err = reqs.Update(wctx, key, want, cur.Revision)
			}
		}
		cancel()
		if err == nil {
			s.log.add("%s: rollout %s paused=%v (generation %d)", ft.Kind, id, paused, want.Generation)
			return true
		}
		s.log.add("%s: write %s (paused=%v) failed, retrying: %v", ft.Kind, key, paused, err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return false
}
