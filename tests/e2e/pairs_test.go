package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// applyLog records when each node's applier ran, to see which overlapped.
type applyLog struct {
	mu   sync.Mutex
	runs map[string][][2]time.Time
}

func (l *applyLog) wrap(d time.Duration) func(string, agent.Applier) agent.Applier {
	return func(node string, a agent.Applier) agent.Applier {
		return agent.ApplierFunc(func(ctx context.Context, c *sluicev1.DesiredConfig) error {
			start := time.Now()
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
			err := a.Apply(ctx, c)
			l.mu.Lock()
			l.runs[node] = append(l.runs[node], [2]time.Time{start, time.Now()})
			l.mu.Unlock()
			return err
		})
	}
}

func (l *applyLog) overlap(a, b string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.runs[a] {
		for _, y := range l.runs[b] {
			if x[0].Before(y[1]) && y[0].Before(x[1]) {
				return true
			}
		}
	}
	return false
}

// Two redundancy groups of two nodes, maxParallel 4: the members of a group
// apply one after the other (the second only once the first reported),
// the groups side by side; the rollout succeeds on every node.
func TestRedundancyGroups_MembersApplyOneAtATime(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	log := &applyLog{runs: map[string][][2]time.Time{}}
	// Margin: applies of 500 ms: a pair applied together would overlap by
	// nearly all of it.
	s := (&system{t: t, env: env, dir: t.TempDir(), wrap: log.wrap(500 * time.Millisecond),
		pairs: map[string]string{"node-01": "leaf-1", "node-02": "leaf-1", "node-03": "leaf-2", "node-04": "leaf-2"}}).start(4)
	waitRegistered(t, env, 4)
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "4"})
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 4 {
		t.Fatalf("rollout ended %s (%s) %v; want SUCCEEDED on all 4", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	for _, pair := range [][2]string{{"node-01", "node-02"}, {"node-03", "node-04"}} {
		if log.overlap(pair[0], pair[1]) {
			t.Errorf("%s and %s, one redundancy group, applied at the same time: %v", pair[0], pair[1], log.runs)
		}
	}
	if !log.overlap("node-01", "node-03") && !log.overlap("node-01", "node-04") {
		t.Errorf("the two groups did not apply side by side (maxParallel 4): %v", log.runs)
	}
	assertInvariants(t, s, r)
}
