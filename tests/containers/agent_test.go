//go:build containers

package containers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// nodeLease is how long a node's presence lives without a heartbeat: the
// rollout-coordinator's --node-lease in these tests (serviceEnv), which the
// agents take from the nodes bucket.
const nodeLease = 15 * time.Second

// testAgentCutOffBriefly disconnects the agent of a node the rollout has
// not reached yet from the network, keeps it off while the coordinator
// writes that node's desired config, and connects it again well within its
// node lease. Its TCP connection carries on where it stalled: the agent gets
// the config, applies it and the node is counted provisioned; nothing is
// skipped.
func testAgentCutOffBriefly(t *testing.T, c *cluster) {
	a := c.apply(t, intentsWith(t, 430), oneAtATime())
	c.waitRollout(t, a.rollout, rolloutTimeout, "one node provisioned", running(1))
	victim := c.untouched(t, a.rollout)
	cut := time.Now()
	c.disconnect(t, victim)
	c.waitNode(t, victim, nodeLease, "to be given the rollout's config while cut off", func(d *sluicev1.DesiredConfig, _ *sluicev1.NodeStatus) bool {
		return d.GetRollout() == a.rollout
	})
	time.Sleep(2 * time.Second) // off a little longer: the write is on its way to a stalled connection
	if away := time.Since(cut); away > nodeLease-3*time.Second {
		t.Fatalf("%s was off %s, too close to its node lease %s for this scenario", victim, away, nodeLease)
	}
	back := time.Now()
	c.connect(t, victim)
	c.waitNode(t, victim, time.Minute, "to run the rollout's target", func(d *sluicev1.DesiredConfig, st *sluicev1.NodeStatus) bool {
		return st.GetRollout() == a.rollout && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && st.GetFingerprint() == d.GetFingerprint()
	})
	t.Logf("%s was cut off for %s while its desired config was written; provisioned %s after it was connected again",
		victim, back.Sub(cut).Round(10*time.Millisecond), time.Since(back).Round(10*time.Millisecond))

	r := c.waitEnd(t, a.rollout, rolloutTimeout)
	if n := r.GetCounts(); n.GetProvisioned() != uint32(len(agents)) || n.GetSkipped() != 0 {
		t.Errorf("rollout %s counts %v; want every node provisioned, none skipped", r.GetId(), n)
	}
	c.assertSucceeded(t, r, allNodes()...)
	c.assertInvariants(t, r)
}

// testAgentCutOffPastItsLease disconnects the agent of a node the rollout
// has not reached yet for longer than its node lease, with a coordinator
// leading: when its presence lapses the node is skipped as departed (not
// failed) and the rollout succeeds without it. Connected again after the
// rollout ended, the agent registers again and is given the configuration
// in force: the node ends at the rollout's target.
func testAgentCutOffPastItsLease(t *testing.T, c *cluster) {
	a := c.apply(t, intentsWith(t, 431), oneAtATime())
	c.waitRollout(t, a.rollout, rolloutTimeout, "one node provisioned", running(1))
	victim := c.untouched(t, a.rollout)
	cut := time.Now()
	c.disconnect(t, victim)

	r := c.waitEnd(t, a.rollout, rolloutTimeout)
	t.Logf("rollout %s ended %s %s after %s was cut off: counts %v, skipped %v",
		r.GetId(), r.GetPhase(), time.Since(cut).Round(10*time.Millisecond), victim, r.GetCounts(), r.GetSkipped())
	if n := r.GetCounts(); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || n.GetSkipped() != 1 ||
		!slices.ContainsFunc(r.GetSkipped(), func(o *sluicev1.NodeOutcome) bool { return o.GetNode() == victim }) ||
		n.GetProvisioned() != uint32(len(agents)-1) || n.GetTotal() != uint32(len(agents)) {
		t.Errorf("rollout %s: %s counts %v skipped %v; want SUCCEEDED over %d nodes, %s skipped as departed, the other %d provisioned",
			r.GetId(), r.GetPhase(), n, r.GetSkipped(), len(agents), victim, len(agents)-1)
	}
	c.rejoin(t, victim, r, cut)
	c.assertSucceeded(t, r, allNodes()...)
	c.assertInvariants(t, r)
}

// testAgentCutOffWhileNoCoordinatorLeads is the same cut while both
// coordinators are stopped (SIGTERM: the leader releases its lease), until
// the node's presence has lapsed. The next term finds the node gone when it
// loads the state and resumes the rollout without it: the node is left out
// of the rollout's nodes (its total shrinks), neither skipped nor failed,
// and the rollout succeeds. The time without a leader is not in its leader
// time. Connected again, the node is given the configuration in force.
func testAgentCutOffWhileNoCoordinatorLeads(t *testing.T, c *cluster) {
	a := c.apply(t, intentsWith(t, 432), oneAtATime())
	c.waitRollout(t, a.rollout, rolloutTimeout, "one node provisioned", running(1))
	// The coordinators stop first, so that the node cut off next is one the
	// rollout has not reached: no leader writes anything meanwhile.
	lease := c.leader(t)
	for _, role := range []string{"coordinator-1", "coordinator-2"} {
		if role != lease.GetHolder() {
			c.stop(t, role, 10*time.Second)
		}
	}
	c.stop(t, lease.GetHolder(), 10*time.Second)
	leaderless := time.Now()
	victim := c.untouched(t, a.rollout)
	cut := time.Now()
	c.disconnect(t, victim)
	if d := time.Until(cut.Add(nodeLease + 5*time.Second)); d > 0 {
		time.Sleep(d)
	}
	c.start(t, "coordinator-1")
	c.start(t, "coordinator-2")
	var led time.Time // when the next term's lease was acquired, by its record
	eventually(t, 3*leaderLease, "a coordinator to lead again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if l, err := c.lease(ctx); err == nil && l != nil && l.GetEpoch() > lease.GetEpoch() {
			led = l.GetAcquiredAt().AsTime()
		}
		return !led.IsZero()
	})
	gap := led.Sub(leaderless) // the leader had released its lease when its stop returned

	r := c.waitEnd(t, a.rollout, rolloutTimeout)
	t.Logf("rollout %s ended %s with %s still cut off: counts %v, skipped %v", r.GetId(), r.GetPhase(), victim, r.GetCounts(), r.GetSkipped())
	if n := r.GetCounts(); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || n.GetTotal() != uint32(len(agents)-1) ||
		n.GetProvisioned() != uint32(len(agents)-1) || n.GetSkipped() != 0 || len(r.GetFailures()) != 0 {
		t.Errorf("rollout %s: %s counts %v skipped %v failures %v; want SUCCEEDED over the %d nodes present when the next term loaded the state, %s left out",
			r.GetId(), r.GetPhase(), n, r.GetSkipped(), r.GetFailures(), len(agents)-1, victim)
	}
	// The node the previous term counted cannot be named (the rollout never
	// wrote to it), but the term that resumed says one is gone and why.
	if !slices.ContainsFunc(c.events(t, leaderless), func(e *sluicev1.Event) bool {
		return e.GetType() == "RolloutResumed" && e.GetRollout() == a.rollout &&
			strings.Contains(e.GetReason(), "1 node(s) the previous term counted left while no coordinator led")
	}) {
		t.Errorf("no RolloutResumed event of %s says that one counted node left while no coordinator led", a.rollout)
	}
	if lt := r.GetLeaderTime().AsDuration(); lt > wall(r)-gap+slack {
		t.Errorf("leader time %s counts the %s without a leader: the rollout ran %s", lt, gap, wall(r))
	} else {
		t.Logf("rollout %s: %s wall, %s under a leader (%s without one)", r.GetId(), wall(r).Round(10*time.Millisecond), lt.Round(10*time.Millisecond), gap.Round(10*time.Millisecond))
	}
	c.rejoin(t, victim, r, cut)
	c.assertSucceeded(t, r, allNodes()...)
	c.assertInvariants(t, r)
}

// rejoin connects victim, cut off since cut, again after rollout r ended
// and waits until it runs r's target, given to it as the configuration in
// force.
func (c *cluster) rejoin(t *testing.T, victim string, r *sluicev1.Rollout, cut time.Time) {
	t.Helper()
	back := time.Now()
	c.connect(t, victim)
	c.waitNode(t, victim, 2*time.Minute, "to register again and run the rollout's target", func(d *sluicev1.DesiredConfig, st *sluicev1.NodeStatus) bool {
		return d.GetRevision() == r.GetRevision() && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && st.GetFingerprint() == d.GetFingerprint()
	})
	// Its presence too: a status written does not mean its next heartbeat
	// has registered it again (up to a beat later), and the next scenario's
	// rollout counts only the nodes present when it starts.
	eventually(t, 2*time.Minute, victim+" present again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.b.Nodes.Get(ctx, victim)
		return err == nil
	})
	t.Logf("%s connected again after %s away: at the rollout's target and present %s later", victim, back.Sub(cut).Round(10*time.Millisecond), time.Since(back).Round(10*time.Millisecond))
}

// testAgentRestartedMidApply restarts an agent's container (docker restart:
// SIGTERM, then start) while its applier runs: the agent cancels the apply
// and leaves its marker, restores its last-good config at start, then
// applies the desired config again. The node ends provisioned at the
// target and the rollout succeeds.
func testAgentRestartedMidApply(t *testing.T, c *cluster) {
	const victim = "node-02"
	c.setApplySeconds(t, victim, 8)
	since := time.Now()
	a := c.apply(t, intentsWith(t, 440), oneAtATime())
	c.waitNode(t, victim, rolloutTimeout, "to be applying", func(_ *sluicev1.DesiredConfig, st *sluicev1.NodeStatus) bool {
		return st.GetRollout() == a.rollout && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING && st.GetProgress() == "applying"
	})
	c.setApplySeconds(t, victim, 1) // the restore and the apply after the restart are quick
	restarted := time.Now()
	c.stop(t, victim, 10*time.Second)
	c.start(t, victim)
	t.Logf("%s restarted mid-apply in %s", victim, time.Since(restarted).Round(10*time.Millisecond))

	r := c.waitEnd(t, a.rollout, rolloutTimeout)
	c.assertSucceeded(t, r, allNodes()...)
	c.assertInvariants(t, r)
	evs := c.events(t, since)
	restored := eventsOf(evs, "", "NodeRestored")
	if !slices.ContainsFunc(restored, func(e *sluicev1.Event) bool {
		return e.GetNode() == victim && strings.Contains(e.GetReason(), "interrupted apply")
	}) {
		t.Errorf("no NodeRestored of %s for the interrupted apply; NodeRestored events: %v", victim, restored)
	}
	if bad := eventsOf(evs, r.GetId(), "NodeInvalid", "NodeReverted", "NodeTimedOut", "NodeFailed"); len(bad) > 0 {
		t.Errorf("the restart failed or reverted nodes: %v", bad)
	}
}

// untouched names the last node (by name) that rollout has not written a
// desired config for yet.
func (c *cluster) untouched(t *testing.T, rollout string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes := allNodes()
	for i := len(nodes) - 1; i >= 0; i-- {
		d, err := c.nodeConfigs().Get(ctx, contract.DesiredKey(nodes[i]))
		if err == nil && d.Value.GetRollout() != rollout {
			return nodes[i]
		}
	}
	t.Fatalf("rollout %s has reached every node already", rollout)
	return ""
}

// waitNode waits until node's desired config and status satisfy cond.
func (c *cluster) waitNode(t *testing.T, node string, timeout time.Duration, what string, cond func(*sluicev1.DesiredConfig, *sluicev1.NodeStatus) bool) {
	t.Helper()
	eventually(t, timeout, node+" "+what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := c.nodeConfigs().Get(ctx, contract.DesiredKey(node))
		if err != nil {
			return false
		}
		st, err := c.statuses().Get(ctx, node)
		return err == nil && cond(d.Value, st.Value)
	})
}
