package e2e

import (
	"context"
	"errors"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/testproc"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestUpgrade_BaselineAgentBesideTodaysControlPlane_NothingGoodRecordedInvalid
// covers issue 38 item 2 with the agent of the baseline release itself,
// built from its commit, beside today's control plane and agents, then
// restarted as today's agent (a rolling upgrade's last step):
//   - a plain rollout reaches every node, the baseline agent included;
//   - an apply with --bake-checks, which that agent cannot read, is refused
//     at request time, naming it, and nothing is stored (the coordinator's
//     own refusal before touching any node is the decider's tables'); before,
//     it was written, timed out at the pickup deadline and the good
//     fingerprint recorded invalid;
//   - with --skip-incompatible it skips that node and succeeds, and the node
//     then gets the config in force without the bake checks;
//   - once the node runs today's agent, a bake-checked rollout reaches it.
//
// No fingerprint is ever recorded invalid. The node lease is the baseline
// agent's built-in 15 s, which it insists on (docs/deploy.md).
func TestUpgrade_BaselineAgentBesideTodaysControlPlane_NothingGoodRecordedInvalid(t *testing.T) {
	bin := baselineBinaries(t).bin("sluice-agent")
	settings := contract.DefaultSettings()
	settings.NodeLease = 15 * time.Second
	env := natstest.Start(t, settings)
	s := (&system{t: t, env: env, dir: t.TempDir()}).start(2)

	old := nodeName(2)
	oldArgs := []string{"--server", env.URL, "--node", old, "--state-dir", filepath.Join(s.dir, old),
		"--labels", "zone=zone-c,rack=rack-1", "--log-level", "debug"}
	if f := env.CredsFile(t, creds.RoleNode, old); f != "" {
		oldArgs = append(oldArgs, "--creds", f)
	}
	p, err := testproc.Start(exec.Command(bin, oldArgs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	defer func() {
		if t.Failed() {
			t.Logf("the baseline agent's output:\n%s", p.Output())
		}
	}()
	waitRegistered(t, env, 3)
	s.mu.Lock()
	s.labels[old] = map[string]string{"zone": "zone-c", "rack": "rack-1"}
	s.mu.Unlock()
	bake := func(skip bool) *sluicev1.Strategy {
		return &sluicev1.Strategy{MaxParallel: "3", FirstWave: 1, BakeTime: durationpb.New(time.Second), BakeChecks: 1,
			BakeCheckInterval: durationpb.New(200 * time.Millisecond), SkipIncompatible: skip}
	}

	plain := apply(t, env, examplesWith(t, 500), &sluicev1.Strategy{MaxParallel: "3"})
	r := waitRolloutEnd(t, env, plain.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 3 {
		t.Fatalf("plain rollout ended %s (%s), counts %v; want SUCCEEDED on all 3, the baseline agent's node included", r.GetPhase(), r.GetReason(), r.GetCounts())
	}

	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = apiclient.Apply(actx, env.Conn, &sluicev1.ApplyRequest{Intents: examplesWith(t, 501), Strategy: bake(false), Source: "e2e"})
	acancel()
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid || !strings.Contains(ae.Description, old+": its agent") ||
		!strings.Contains(ae.Description, contract.FeatureBakeChecks) || !strings.Contains(ae.Description, "nothing was stored") {
		t.Fatalf("bake-checked apply: %v; want refused (%s) at request time, naming %s and %s", err, contract.ErrCodeInvalid, old, contract.FeatureBakeChecks)
	}
	noneRecordedInvalid(t, env)

	skipped := apply(t, env, examplesWith(t, 502), bake(true))
	r = waitRolloutEnd(t, env, skipped.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetIncompatible() != 1 || r.GetCounts().GetProvisioned() != 2 {
		t.Fatalf("rollout with --skip-incompatible ended %s (%s), counts %v; want SUCCEEDED, %s skipped", r.GetPhase(), r.GetReason(), r.GetCounts(), old)
	}
	waitRuns(t, env, old, skipped.GetRevision())
	noneRecordedInvalid(t, env)
	assertInvariants(t, s, r)

	// The rolling upgrade reaches the node: today's agent, on the same state.
	p.Kill()
	s.startAgent(2)
	// margin: the poll ends as soon as the new agent's presence is written.
	natstest.Eventually(t, 30*time.Second, "today's agent on "+old+" to state the features it reads", func() bool {
		pr, err := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Get(context.Background(), old)
		return err == nil && len(pr.Value.GetConfigFeatures()) > 0
	})
	upgraded := apply(t, env, examplesWith(t, 503), bake(false))
	r = waitRolloutEnd(t, env, upgraded.GetGeneration(), 90*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 3 {
		t.Fatalf("bake-checked rollout after the upgrade ended %s (%s), counts %v; want SUCCEEDED on all 3", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	noneRecordedInvalid(t, env)
	assertInvariants(t, s, r)
}

// waitRuns waits until node reports Provisioned on its desired config,
// of revision rev.
func waitRuns(t *testing.T, env *natstest.Env, node, rev string) {
	t.Helper()
	desired, status, _ := stores(env)
	ctx := context.Background()
	// margin: the poll ends as soon as the node reports; an apply takes milliseconds.
	natstest.Eventually(t, 30*time.Second, node+" to run revision "+rev, func() bool {
		d, derr := desired.Get(ctx, contract.DesiredKey(node))
		st, serr := status.Get(ctx, node)
		return derr == nil && serr == nil && d.Value.GetRevision() == rev &&
			st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && st.Value.GetFingerprint() == d.Value.GetFingerprint()
	})
}

// TestUpgrade_RollingRestartFromBaseline_RolloutInFlightEndsAsOnOneVersion
// is issue 38's rolling upgrade. A control plane and fleet of the baseline
// release's binaries (two rollout-coordinators, the configurator, the
// reaper, four agents) run on one nats-server and roll a first change out.
// A second change starts there, one node at a time with a 3 s bake
// between, and while it is in flight every process is replaced by today's
// binary, one at a time, in docs/deploy.md's order:
//   - the leading coordinator: the baseline's standby takes the rollout
//     over, and today's coordinator starts beside it, as a standby, for
//     5 s, keeping the leases bucket's TTL (the baseline's lease) so that
//     the baseline's leader keeps its term until it is stopped; then the
//     other coordinator (today's takes the rollout over when it stops),
//     the configurator and the reaper;
//   - the agents, each at a different point of its node's part: node-01
//     after the baseline's agent provisioned it, node-02 and node-03 the
//     moment the rollout writes their desired config (the baseline's agent
//     is picking it up as it is stopped), node-04 before the rollout
//     reaches it.
//
// The rollout ends as on one version, Succeeded with every node on the
// target, and nothing is recorded invalid. Then the all-new fleet rolls out
// with bake checks, a config feature the baseline's agents lack. Today's
// coordinators run with --node-lease 15s, as docs/deploy.md asks while
// agents of the baseline may still (re)start.
func TestUpgrade_RollingRestartFromBaseline_RolloutInFlightEndsAsOnOneVersion(t *testing.T) {
	old, today := baselineBinaries(t), todaysBinaries(t)
	env := natstest.StartBare(t)
	f := newFleet(t, env)
	f.nodeLease = 15 * time.Second
	const n = 4
	for _, name := range []string{"coordinator-a", "configurator", "reaper"} {
		f.start(name, old)
	}
	f.bind()
	f.waitLeader("coordinator-a", old)
	f.start("coordinator-b", old)
	for i := range n {
		f.start(nodeName(i), old)
	}
	for _, name := range []string{"coordinator-b", "configurator", "reaper", nodeName(0), nodeName(1), nodeName(2), nodeName(3)} {
		f.waitUp(name, old)
	}

	first := apply(t, env, examplesWith(t, 600), &sluicev1.Strategy{MaxParallel: "4"})
	r := waitRolloutEnd(t, env, first.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != n {
		t.Fatalf("the baseline fleet's first rollout ended %s (%s), counts %v; want SUCCEEDED on %d", r.GetPhase(), r.GetReason(), r.GetCounts(), n)
	}

	inFlight := apply(t, env, examplesWith(t, 601), &sluicev1.Strategy{MaxParallel: "1", FirstWave: 1, WaveGrowth: 1,
		BakeTime: durationpb.New(3 * time.Second)})
	id := contract.RolloutID(inFlight.GetGeneration(), inFlight.GetRevision())
	ctx := context.Background()
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	desired, status, _ := stores(env)
	reached := func(node string) bool {
		d, err := desired.Get(ctx, contract.DesiredKey(node))
		return err == nil && d.Value.GetRollout() == id
	}
	provisioned := func(node string) bool {
		d, derr := desired.Get(ctx, contract.DesiredKey(node))
		st, serr := status.Get(ctx, node)
		return reached(node) && derr == nil && serr == nil &&
			st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && st.Value.GetFingerprint() == d.Value.GetFingerprint()
	}
	// margin: each wait below ends as soon as its step of the rollout
	// (a 3 s bake and milliseconds of work) is done.
	await := func(what string, cond func() bool) { t.Helper(); natstest.Eventually(t, 60*time.Second, what, cond) }
	began := time.Now()
	inFlightNow := func(name string) {
		t.Helper()
		if e, err := rollouts.Get(ctx, id); err != nil || e.Value.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
			t.Fatalf("rollout %s was %s (%s; counts %v; %v) when %s was to be restarted, %s after the first restart: the test must restart every process while it is in flight",
				id, e.Value.GetPhase(), e.Value.GetReason(), e.Value.GetCounts(), err, name, time.Since(began).Round(time.Millisecond))
		}
	}
	// restart replaces name by today's binary, the rollout still in flight.
	restart := func(name string) {
		t.Helper()
		inFlightNow(name)
		f.restart(name, today)
	}
	await("the baseline's plane to provision node-01", func() bool { return provisioned(nodeName(0)) })
	began = time.Now()
	// The leader goes first; its new process starts once the baseline's
	// standby leads (else it would take the lease it gave up at once).
	inFlightNow("coordinator-a")
	f.stop("coordinator-a")
	f.waitLeader("coordinator-b", old)
	leases := store.New(env.Buckets.Leases, func() *sluicev1.LeaderLease { return &sluicev1.LeaderLease{} })
	term, err := leases.Get(ctx, contract.LeaseCoordinator)
	if err != nil {
		t.Fatalf("the lease coordinator-b (%s) leads by: %v", old.version, err)
	}
	baselineTTL := leasesTTL(t, env)
	f.start("coordinator-a", today)
	f.waitUp("coordinator-a", today)
	// Today's coordinator manages the leases bucket, but does not change
	// its TTL while a lease is held: it keeps the baseline's (10 s,
	// renewed every 3.3 s), though its own --leader-lease is 2 s, and
	// stands by. The baseline's leader keeps its term, renewing it, until
	// it is stopped (docs/deploy.md). The 5 s stand for an orchestrator's
	// pause between two instances.
	time.Sleep(5 * time.Second)
	now, err := leases.Get(ctx, contract.LeaseCoordinator)
	if err != nil || now.Value.GetHolder() != term.Value.GetHolder() || now.Value.GetSession() != term.Value.GetSession() ||
		!now.Value.GetAcquiredAt().AsTime().Equal(term.Value.GetAcquiredAt().AsTime()) || now.Revision == term.Revision {
		t.Fatalf("lease %v (revision %d; %v) 5 s after today's coordinator-a started beside the baseline's leader; "+
			"want coordinator-b's term %v (revision %d) kept and renewed", now.Value, now.Revision, err, term.Value, term.Revision)
	}
	if ttl := leasesTTL(t, env); ttl != baselineTTL {
		t.Fatalf("leases TTL %s after today's coordinator-a started beside the baseline's leader, want the baseline's %s kept", ttl, baselineTTL)
	}
	restart("coordinator-b")
	f.waitLeader("coordinator-a", today)
	restart("configurator")
	restart("reaper")
	restart(nodeName(0))
	await("the rollout to reach node-02", func() bool { return reached(nodeName(1)) })
	restart(nodeName(1))
	await("the rollout to reach node-03", func() bool { return reached(nodeName(2)) })
	restart(nodeName(2))
	await("node-03 to be provisioned", func() bool { return provisioned(nodeName(2)) })
	restart(nodeName(3))
	if reached(nodeName(3)) {
		t.Errorf("the rollout reached node-04 before its agent was restarted")
	}

	r = waitRolloutEnd(t, env, inFlight.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != n {
		t.Fatalf("the rollout in flight through the upgrade ended %s (%s), counts %v; want SUCCEEDED on %d", r.GetPhase(), r.GetReason(), r.GetCounts(), n)
	}
	t.Logf("the rollout in flight ended %s after the first restart", time.Since(began).Round(time.Millisecond))
	t.Logf("leader lease in force after the rolling restart: %s (the baseline's %s, kept while a coordinator led)", leasesTTL(t, env), baselineTTL)
	s := f.system()
	assertFleetRuns(t, s, expectedFingerprints(t, env, inFlight.GetRevision(), s.labels))
	noneRecordedInvalid(t, env)
	assertInvariants(t, s, r)

	// The all-new fleet reads a feature the baseline's agents lack.
	next := apply(t, env, examplesWith(t, 602), &sluicev1.Strategy{MaxParallel: "2", FirstWave: 1, BakeTime: durationpb.New(time.Second),
		BakeChecks: 1, BakeCheckInterval: durationpb.New(200 * time.Millisecond)})
	r = waitRolloutEnd(t, env, next.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != n {
		t.Fatalf("the all-new fleet's bake-checked rollout ended %s (%s), counts %v; want SUCCEEDED on %d", r.GetPhase(), r.GetReason(), r.GetCounts(), n)
	}
	assertFleetRuns(t, s, expectedFingerprints(t, env, next.GetRevision(), s.labels))
	noneRecordedInvalid(t, env)
	assertInvariants(t, s, r)
}

// TestUpgrade_TodaysAgentsOnTheBaselinesControlPlane_RolloutSucceeds is the
// other direction of issue 38's skew: agents upgraded before the control
// plane. The baseline release's coordinator, configurator and reaper run
// node-01 and node-02 on today's agent and node-03 on the baseline's: a
// rollout in waves succeeds on all three, every node on the target, and
// nothing is recorded invalid. (A config the baseline's plane writes never
// needs a feature, so today's agents read all of it; docs/deploy.md.)
func TestUpgrade_TodaysAgentsOnTheBaselinesControlPlane_RolloutSucceeds(t *testing.T) {
	old, today := baselineBinaries(t), todaysBinaries(t)
	env := natstest.StartBare(t)
	f := newFleet(t, env)
	for _, name := range []string{"coordinator-a", "configurator", "reaper"} {
		f.start(name, old)
	}
	f.bind()
	agents := map[string]release{nodeName(0): today, nodeName(1): today, nodeName(2): old}
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		f.start(name, agents[name])
	}
	f.waitLeader("coordinator-a", old)
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		f.waitUp(name, agents[name])
	}
	for i, table := range []uint32{700, 701} {
		resp := apply(t, env, examplesWith(t, table), &sluicev1.Strategy{MaxParallel: "2", FirstWave: 1, BakeTime: durationpb.New(500 * time.Millisecond)})
		r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
		if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 3 {
			t.Fatalf("rollout %d on the baseline's plane ended %s (%s), counts %v; want SUCCEEDED on all 3", i+1, r.GetPhase(), r.GetReason(), r.GetCounts())
		}
		s := f.system()
		assertFleetRuns(t, s, expectedFingerprints(t, env, resp.GetRevision(), s.labels))
		noneRecordedInvalid(t, env)
		assertInvariants(t, s, r)
	}
}

// leasesTTL is the leases bucket's TTL: the leader lease in force.
func leasesTTL(t *testing.T, env *natstest.Env) time.Duration {
	t.Helper()
	st, err := env.Buckets.Leases.Status(context.Background())
	if err != nil {
		t.Fatalf("status of %s: %v", contract.BucketLeases, err)
	}
	return st.TTL()
}
