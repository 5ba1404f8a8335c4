//go:build containers

package containers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// testCoordinatorKilled kills the leading coordinator (SIGKILL: it releases
// nothing) while a node applies: the standby takes over once the lease
// lapses, carries the rollout on and reverts no healthy node; the leaderless
// time is not counted in the rollout's leader time.
func testCoordinatorKilled(t *testing.T, c *cluster) {
	lease := c.leader(t)
	victim, standby := lease.GetHolder(), "coordinator-1"
	if victim == standby {
		standby = "coordinator-2"
	}
	a := c.apply(t, intentsWith(t, 410), oneAtATime())
	since := time.Now()
	c.waitRollout(t, a.rollout, rolloutTimeout, "one node provisioned", running(1))

	killed := time.Now()
	c.kill(t, victim)
	dead := time.Now() // the process died between killed and dead

	// Takeover, from the records the standby writes — its lease (acquired_at:
	// its term starts) and its term's fence in the rollouts bucket (the
	// term's first write) — and its /readyz line, polled every 50ms.
	var lease2 *sluicev1.LeaderLease
	var fence *sluicev1.Fence
	var ready time.Time
	var line string
	fences := store.New(c.b.Rollouts, func() *sluicev1.Fence { return &sluicev1.Fence{} })
	poll(t, 50*time.Millisecond, 4*leaderLease, standby+" to take over", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if lease2 == nil {
			if l, err := c.lease(ctx); err == nil && l != nil && l.GetHolder() == standby && l.GetEpoch() > lease.GetEpoch() {
				lease2 = l
			}
		}
		if lease2 != nil && fence == nil {
			if f, err := fences.Get(ctx, contract.KeyFence); err == nil && f.Value.GetEpoch() == lease2.GetEpoch() {
				fence = f.Value
			}
		}
		if lease2 != nil && ready.IsZero() {
			if l, err := c.readyLine(ctx, standby); err == nil && strings.HasPrefix(l, "ready: leading term") {
				ready, line = time.Now(), l
			}
		}
		return lease2 != nil && fence != nil && !ready.IsZero()
	})
	acquired := lease2.GetAcquiredAt().AsTime()
	t.Logf("takeover after killing %s (lease %s): %s acquired the lease %s after the kill, wrote its term's fence (epoch %d, the term's first write) after %s; its /readyz said %q after %s",
		victim, leaderLease, standby, acquired.Sub(killed).Round(10*time.Millisecond), fence.GetEpoch(),
		fence.GetAt().AsTime().Sub(killed).Round(10*time.Millisecond), line, ready.Sub(killed).Round(10*time.Millisecond))
	if d := acquired.Sub(killed); d > 2*leaderLease+5*time.Second {
		t.Errorf("takeover took %s; want within about twice the lease (%s)", d, 2*leaderLease)
	}
	gap := acquired.Sub(dead) // no leader for at least this long

	r := c.waitEnd(t, a.rollout, rolloutTimeout)
	c.assertSucceeded(t, r, allNodes()...)
	if rev := eventsOf(c.events(t, since), r.GetId(), "NodeReverted", "RolloutReverting", "NodeTimedOut", "NodeFailed"); len(rev) > 0 {
		t.Errorf("the takeover reverted or failed nodes: %v", rev)
	}
	if lt := r.GetLeaderTime().AsDuration(); lt > wall(r)-gap+slack {
		t.Errorf("leader time %s counts the %s without a leader: the rollout ran %s", lt, gap, wall(r))
	} else {
		t.Logf("rollout %s: %s wall, %s under a leader (%s without one)", r.GetId(), wall(r).Round(10*time.Millisecond), lt.Round(10*time.Millisecond), gap.Round(10*time.Millisecond))
	}
	c.assertInvariants(t, r)

	// The killed coordinator comes back as the standby.
	c.start(t, victim)
	eventually(t, 30*time.Second, victim+" to stand by", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l, err := c.readyLine(ctx, victim)
		return err == nil && strings.HasPrefix(l, "ready: standing by")
	})
}
