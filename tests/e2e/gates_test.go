package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/promtest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// Every test here runs a real Prometheus (Debian's binary), scraping an
// exporter the test controls every second.

// errorRateGate follows error_ratio: at most max over 3s, at least 2 values.
func errorRateGate(url string, max float64, deadline time.Duration) *sluicev1.Gate {
	return &sluicev1.Gate{Name: "error-rate", Prometheus: url, Query: "max(error_ratio)", Max: wrapperspb.Double(max),
		Lookback: durationpb.New(3 * time.Second), Step: durationpb.New(time.Second), MinSamples: 2, Deadline: durationpb.New(deadline)}
}

// canaryThenRest is one node, then the rest in a second wave.
func canaryThenRest(gates ...*sluicev1.Gate) *sluicev1.Strategy {
	return &sluicev1.Strategy{MaxParallel: "3", FirstWave: 1, WaveGrowth: 10, Gates: gates}
}

func rolloutStore(env *natstest.Env) *store.Store[*sluicev1.Rollout] {
	return store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
}

// waitWaiting polls the rollout's record until its waiting line contains
// want, and returns the record.
func waitWaiting(t *testing.T, env *natstest.Env, id, want string, timeout time.Duration) *sluicev1.Rollout {
	t.Helper()
	var r *sluicev1.Rollout
	natstest.Eventually(t, timeout, "the rollout to say it is "+want, func() bool {
		e, err := rolloutStore(env).Get(context.Background(), id)
		if err == nil {
			r = e.Value
		}
		return err == nil && strings.Contains(r.GetWaiting(), want)
	})
	return r
}

// writtenBy lists the nodes whose desired config rollout id wrote.
func writtenBy(t *testing.T, env *natstest.Env, id string, nodes ...string) []string {
	t.Helper()
	desired, _, _ := stores(env)
	var out []string
	for _, n := range nodes {
		if d, err := desired.Get(context.Background(), contract.DesiredKey(n)); err == nil && d.Value.GetRollout() == id && !d.Value.GetRevert() {
			out = append(out, n)
		}
	}
	return out
}

func startPrometheus(t *testing.T, opts ...promtest.Option) (*promtest.Server, *promtest.Exporter) {
	e := promtest.NewExporter(t)
	e.Set("error_ratio", 0.001)
	p := promtest.Start(t, append([]promtest.Option{promtest.Scrape(e.Addr())}, opts...)...)
	p.WaitFor("error_ratio", 30*time.Second)
	return p, e
}

// A gate whose query stays under its threshold passes after the canary and
// before the end: the rollout succeeds and its record says so.
func TestGates_PassingGate(t *testing.T) {
	p, _ := startPrometheus(t)
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 3, nil)
	waitRegistered(t, env, 3)
	resp := apply(t, env, examplesWith(t, 300), canaryThenRest(errorRateGate(p.URL(), 0.01, time.Minute)))
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 90*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 3 {
		t.Fatalf("ended %s (%s) %v; want SUCCEEDED on 3 nodes", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	if g := r.GetGates(); len(g) != 1 || g[0].GetVerdict() != contract.GatePassed || g[0].GetBefore() != contract.GateEnd ||
		g[0].GetValue() != 0.001 || g[0].GetSamples() < 2 {
		t.Fatalf("record's gates %v; want error-rate passed before the end at 0.001", g)
	}
	assertInvariants(t, s, r)
}

// A gate whose query is over its threshold after the canary stops the
// rollout: the canary is reverted, no other node is touched, and the record
// names the gate, query, value and threshold.
func TestGates_FailingGateRevertsTheRollout(t *testing.T) {
	p, e := startPrometheus(t)
	e.Set("error_ratio", 0.05)
	p.WaitFor("error_ratio == 0.05", 30*time.Second)
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 3, nil)
	waitRegistered(t, env, 3)
	resp := apply(t, env, examplesWith(t, 300), canaryThenRest(errorRateGate(p.URL(), 0.01, time.Minute)))
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 90*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK || !strings.Contains(r.GetReason(), "blocked by gate error-rate: 0.05 > 0.01 over 3s") {
		t.Fatalf("ended %s (%s); want ROLLED_BACK blocked by the gate", r.GetPhase(), r.GetReason())
	}
	b := r.GetBlockedBy()
	if b.GetGate() != "error-rate" || b.GetQuery() != "max(error_ratio)" || b.GetValue() != 0.05 || b.GetThreshold() != 0.01 || b.GetComparison() != "<=" {
		t.Fatalf("blocked_by %v; want the gate, its query, value 0.05 and threshold <= 0.01", b)
	}
	if c := r.GetCounts(); c.GetAttempted() != 1 || c.GetReverted() != 1 || c.GetNotStarted() != 2 {
		t.Fatalf("counts %v; want the canary started and reverted, 2 nodes never started", c)
	}
	assertInvariants(t, s, r)
}

const linkRules = `groups:
  - name: links
    rules:
      - alert: LinkDown
        expr: link_down > 0
`

// An alert gate stops and reverts the rollout the moment its alert fires
// in the middle of a wave, not at the next boundary.
func TestGates_AlertFiringMidWaveReverts(t *testing.T) {
	p, e := startPrometheus(t, promtest.Rules(linkRules))
	e.Set("link_down", 0)
	p.WaitFor("link_down", 30*time.Second)
	var fired atomic.Bool
	// node-02's apply brings a link down; every apply takes 1.5 s, so the
	// single wave of four nodes one at a time would take 6 s.
	slow := func(node string, a agent.Applier) agent.Applier {
		return agent.ApplierFunc(func(ctx context.Context, d *sluicev1.DesiredConfig) error {
			if node == "node-02" && !d.GetRevert() {
				e.Set("link_down", 1)
				fired.Store(true)
			}
			if !d.GetRevert() {
				select {
				case <-time.After(1500 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return a.Apply(ctx, d)
		})
	}
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 4, slow)
	waitRegistered(t, env, 4)
	links := &sluicev1.Gate{Name: "links", Prometheus: p.URL(), Alerts: []string{"LinkDown"}, Interval: durationpb.New(200 * time.Millisecond)}
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "1", Gates: []*sluicev1.Gate{links}})
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 90*time.Second)
	if !fired.Load() {
		t.Fatal("node-02 never applied: the alert was never raised")
	}
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK || !strings.Contains(r.GetReason(), "blocked by gate links: alert LinkDown firing") {
		t.Fatalf("ended %s (%s); want ROLLED_BACK because LinkDown fired", r.GetPhase(), r.GetReason())
	}
	if b := r.GetBlockedBy(); b.GetVerdict() != contract.GateFiring || len(b.GetFiring()) != 1 || b.GetFiring()[0] != "LinkDown" {
		t.Fatalf("blocked_by %v", b)
	}
	if c := r.GetCounts(); c.GetProvisioned()+c.GetStopped() >= 4 || c.GetNotStarted() == 0 {
		t.Fatalf("counts %v: the rollout went on after the alert fired (want nodes never started)", c)
	}
	t.Logf("stopped with counts %v", r.GetCounts())
	assertInvariants(t, s, r)
}

// Prometheus down: the gate neither passes nor fails; the next wave waits,
// the record says why, and the rollout fails at the gate's deadline.
func TestGates_PrometheusDownWaitsThenFailsAtTheDeadline(t *testing.T) {
	p, _ := startPrometheus(t)
	p.Stop()
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 3, nil)
	waitRegistered(t, env, 3)
	resp := apply(t, env, examplesWith(t, 300), canaryThenRest(errorRateGate(p.URL(), 0.01, 6*time.Second)))
	id := contract.RolloutID(resp.GetGeneration(), resp.GetRevision())
	w := waitWaiting(t, env, id, "Prometheus did not answer", 30*time.Second)
	seen := time.Now()
	if !strings.Contains(w.GetWaiting(), "connection refused") || w.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
		t.Fatalf("waiting %q, %s; want why (connection refused) while progressing", w.GetWaiting(), w.GetPhase())
	}
	if got := writtenBy(t, env, id, "node-02", "node-03"); len(got) != 0 {
		t.Fatalf("wave 2 started without the gate: %v", got)
	}
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	t.Logf("failed %s after the record first said it waits", time.Since(seen).Round(100*time.Millisecond))
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK ||
		!strings.Contains(r.GetReason(), "blocked by gate error-rate: gave up after waiting 6s for data (error-rate: Prometheus did not answer") {
		t.Fatalf("ended %s (%s); want ROLLED_BACK at the gate deadline", r.GetPhase(), r.GetReason())
	}
	if c := r.GetCounts(); c.GetAttempted() != 1 || c.GetNotStarted() != 2 {
		t.Fatalf("counts %v; want only the canary touched", c)
	}
	assertInvariants(t, s, r)
}

// Too few samples: the gate waits — the record saying how many it has —
// and passes once the series has enough values.
func TestGates_TooFewSamplesWaits(t *testing.T) {
	p, e := startPrometheus(t)
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 3, nil)
	waitRegistered(t, env, 3)
	g := &sluicev1.Gate{Name: "late", Prometheus: p.URL(), Query: "max(late_signal)", Max: wrapperspb.Double(1),
		Lookback: durationpb.New(5 * time.Second), Step: durationpb.New(time.Second), MinSamples: 3, Deadline: durationpb.New(time.Minute)}
	resp := apply(t, env, examplesWith(t, 300), canaryThenRest(g))
	id := contract.RolloutID(resp.GetGeneration(), resp.GetRevision())
	waitWaiting(t, env, id, "late: 0 of 3 samples over 5s", 30*time.Second)
	time.Sleep(2 * time.Second) // Margin: a gate passing on missing data would have started wave 2 within it.
	if got := writtenBy(t, env, id, "node-02", "node-03"); len(got) != 0 {
		t.Fatalf("wave 2 started on too few samples: %v", got)
	}
	e.Set("late_signal", 0)
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 3 {
		t.Fatalf("ended %s (%s) %v; want SUCCEEDED once the samples came", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	assertInvariants(t, s, r)
}
