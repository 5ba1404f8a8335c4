package e2e

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// hangsOn makes node's applier hang (until its context ends) on every
// config but the first it applied and reverts: a stuck apply.
func hangsOn(node string) func(string, agent.Applier) agent.Applier {
	return func(name string, a agent.Applier) agent.Applier {
		if name != node {
			return a
		}
		var mu sync.Mutex
		first := ""
		return agent.ApplierFunc(func(ctx context.Context, c *sluicev1.DesiredConfig) error {
			mu.Lock()
			if first == "" {
				first = c.GetFingerprint()
			}
			hang := c.GetFingerprint() != first && !c.GetRevert()
			mu.Unlock()
			if hang {
				<-ctx.Done()
				return ctx.Err()
			}
			return a.Apply(ctx, c)
		})
	}
}

// The coordinator cancels an operation at its apply deadline: the agent
// stops the hanging apply and restores last-good at once (not at its own,
// later deadline), the node counts as timed out, and the rollout reverts.
func TestOperations_CancelAtTheApplyDeadline_StopsAHangingApplyAndRestoresLastGood(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 2, hangsOn("node-02"))
	waitRegistered(t, env, 2)
	first := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "2"})
	if r := waitRolloutEnd(t, env, first.GetGeneration(), 60*time.Second); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("first rollout ended %s: %s", r.GetPhase(), r.GetReason())
	}
	began := time.Now()
	resp := apply(t, env, examplesWith(t, 301), &sluicev1.Strategy{MaxParallel: "2", ApplyDeadline: durationpb.New(2 * time.Second)})
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	took := time.Since(began)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK {
		t.Fatalf("rollout ended %s (%s); want ROLLED_BACK after node-02 timed out", r.GetPhase(), r.GetReason())
	}
	if c := r.GetCounts(); c.GetTimedOut() != 1 || c.GetAttempted() != 2 {
		t.Errorf("counts %v; want node-02 timed out, 2 operations attempted", c)
	}
	// The agent's own deadline is twice the apply deadline (4s): that the
	// coordinator's cancel came first, the events below say (NodeInvalid's
	// reason). Margin: this bound, 10x the 2s deadline, only catches a
	// hanging apply never stopped.
	if took > 10*2*time.Second {
		t.Errorf("the rollout took %s to end; want the hanging apply stopped at the 2s apply deadline", took)
	}
	// The agent publishes its events without waiting for their acks, and
	// the events stream is not the rollouts bucket: they may land after
	// the rollout's end was read. Margin: a poll, as natstest.Eventually.
	var evs []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		evs = nodeEventsOf(t, env, "node-02")
		if hasEvent(evs, "NodeOperationCancelled", "") && hasEvent(evs, "NodeRestored", "") &&
			hasEvent(evs, "NodeInvalid", "was cancelled by the coordinator at its apply deadline") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("node-02 events %v; want NodeOperationCancelled, then NodeInvalid (cancelled by the coordinator) and NodeRestored", evs)
			break
		}
	}
	assertInvariants(t, s, r)
}

// nodeEventsOf lists node's events as "Type: reason".
func nodeEventsOf(t *testing.T, env *natstest.Env, node string) []string {
	t.Helper()
	ctx := context.Background()
	st, err := env.JS.Stream(ctx, contract.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil || !slices.Contains(contract.EventFilterSubjects(contract.KindNode, node), m.Subject) {
			continue
		}
		ev := &sluicev1.Event{}
		if store.Unmarshal(m.Data, ev) == nil {
			out = append(out, ev.GetType()+": "+ev.GetReason())
		}
	}
	return out
}

// hasEvent reports whether one of evs has type typ and contains text.
func hasEvent(evs []string, typ, text string) bool {
	for _, e := range evs {
		if strings.HasPrefix(e, typ+": ") && strings.Contains(e, text) {
			return true
		}
	}
	return false
}
