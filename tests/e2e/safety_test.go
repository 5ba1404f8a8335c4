package e2e

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// examplesWith is the examples plus a routing table on every node, so that
// every node's config changes.
func examplesWith(t *testing.T, tableID uint32) []*sluicev1.Intent {
	t.Helper()
	in, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	return append(in, &sluicev1.Intent{Name: "fleet-wide", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: tableID}}})
}

func apply(t *testing.T, env *natstest.Env, intents []*sluicev1.Intent, st *sluicev1.Strategy) *sluicev1.ApplyResponse {
	t.Helper()
	// Margin: as applyExamples'.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := apiclient.WaitReady(ctx, env.Conn); err != nil {
		t.Fatal(err)
	}
	resp, err := apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{Intents: intents, Strategy: st, Source: "e2e"})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return resp
}

// failing makes the listed nodes' applies of revision bad fail, as a broken
// config would; everything else (including restoring) goes through.
func failing(bad *atomic.Value, nodes ...string) func(string, agent.Applier) agent.Applier {
	set := map[string]bool{}
	for _, n := range nodes {
		set[n] = true
	}
	return func(node string, a agent.Applier) agent.Applier {
		return agent.ApplierFunc(func(ctx context.Context, d *sluicev1.DesiredConfig) error {
			if set[node] && !d.GetRevert() && d.GetRevision() == bad.Load() {
				return errors.New("link tenant-a: no carrier after applying mtu")
			}
			return a.Apply(ctx, d)
		})
	}
}

func stores(env *natstest.Env) (desired *store.Store[*sluicev1.DesiredConfig], status *store.Store[*sluicev1.NodeStatus], bad *store.Store[*sluicev1.InvalidFingerprint]) {
	return store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }),
		store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }),
		store.New(env.Buckets.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} })
}

// assertInvariants checks the brief's I1-I4 once the rollout r has ended.
func assertInvariants(t *testing.T, s *system, r *sluicev1.Rollout) {
	t.Helper()
	ctx := context.Background()
	desired, status, bad := stores(s.env)
	// I2: it ended, within its progress deadline (counted in leader time).
	if r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING || r.GetPhase() == sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
		t.Errorf("I2: rollout %s has not ended: %s", r.GetId(), r.GetPhase())
	}
	deadline := time.Hour
	if d := r.GetStrategy().GetProgressDeadline(); d != nil {
		deadline = d.AsDuration()
	}
	if r.GetLeaderTime().AsDuration() > deadline {
		t.Errorf("I2: rollout %s ran %s, past its progress deadline %s", r.GetId(), r.GetLeaderTime().AsDuration(), deadline)
	}
	present, err := store.New(s.env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range present {
		d, derr := desired.Get(ctx, contract.DesiredKey(node))
		st, serr := status.Get(ctx, node)
		if derr != nil || serr != nil {
			continue // never configured
		}
		b, _ := desired.Get(ctx, contract.BackupKey(node))
		// I3: the agent's outcome for its desired config is on record.
		if st.Value.GetFingerprint() != d.Value.GetFingerprint() || st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
			t.Errorf("I3: %s desired %.12s but status is %s for %.12s", node, d.Value.GetFingerprint(), st.Value.GetPhase(), st.Value.GetFingerprint())
		}
		// I1: what is in force is the target or the backup, on record and on disk.
		inForce := st.Value.GetAppliedFingerprint()
		backup := b.Value.GetFingerprint()
		if b.Value == nil {
			backup = render.Fingerprint(&sluicev1.NodeConfig{}) // no backup: the node goes back to an empty config
		}
		if inForce != d.Value.GetFingerprint() && inForce != backup {
			t.Errorf("I1: %s runs %.12s, neither its desired %.12s nor its backup %.12s", node, inForce, d.Value.GetFingerprint(), b.Value.GetFingerprint())
		}
		if raw, err := os.ReadFile(filepath.Join(s.dir, node, "config.json")); err == nil {
			var onDisk sluicev1.DesiredConfig
			if err := store.Unmarshal(raw, &onDisk); err != nil || onDisk.GetFingerprint() != inForce {
				t.Errorf("I1: %s has %.12s on disk, status says %.12s in force (%v)", node, onDisk.GetFingerprint(), inForce, err)
			}
		}
	}
	// I4: every failed fingerprint is recorded with node, check and output.
	for _, f := range r.GetFailures() {
		if f.GetResult() != sluicev1.NodeResult_NODE_RESULT_INVALID || f.GetFailedCheck() == "revert" {
			continue
		}
		rec, err := bad.Get(ctx, f.GetFingerprint())
		if err != nil {
			t.Errorf("I4: failed fingerprint %.12s of %s is not recorded: %v", f.GetFingerprint(), f.GetNode(), err)
			continue
		}
		if rec.Value.GetNode() == "" || rec.Value.GetCheck() == "" || rec.Value.GetOutput() == "" {
			t.Errorf("I4: record of %.12s lacks node, check or output: %v", f.GetFingerprint(), rec.Value)
		}
	}
}

// connectivity is the agents' health check: on node-03, a config with
// routing table 301 cuts the node off (as a real check would find out).
var connectivity = agent.CheckSpec{Check: agent.ExecCheck{Label: "connectivity",
	Command: `if [ "$SLUICE_NODE" = node-03 ] && grep -q '"tableId": *301' "$SLUICE_CONFIG"; then echo "ping 10.0.0.1: 100% packet loss"; exit 1; fi`}}

// rollOutThenFailInWave2 applies the examples to 8 nodes, then a change whose
// health check fails on node-03, the second node of wave 2.
func rollOutThenFailInWave2(t *testing.T) (*system, *sluicev1.Rollout, []*sluicev1.Intent) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 8, nil, connectivity)
	waitRegistered(t, env, 8)
	good := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "8"})
	if r := waitRolloutEnd(t, env, good.GetGeneration(), 60*time.Second); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("first rollout: %s %s", r.GetPhase(), r.GetReason())
	}
	broken := examplesWith(t, 301)
	resp := apply(t, env, broken, &sluicev1.Strategy{MaxParallel: "2", FirstWave: 1, WaveGrowth: 2})
	return s, waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second), broken
}

func TestSafeRollout_FailingNodeInWave2RevertsWaves1And2AndRecordsFingerprint(t *testing.T) {
	s, r, _ := rollOutThenFailInWave2(t)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK {
		t.Fatalf("rollout ended %s (%s); want ROLLED_BACK", r.GetPhase(), r.GetReason())
	}
	if !strings.Contains(r.GetReason(), "node-03") {
		t.Errorf("reason %q does not name the failing node", r.GetReason())
	}
	if c := r.GetCounts(); c.GetReverted() != 3 {
		t.Errorf("counts %v: want node-01 (wave 1) and node-02, node-03 (wave 2) reverted", c)
	}
	ctx := context.Background()
	desired, _, bad := stores(s.env)
	for i := range 8 {
		node := nodeName(i)
		d, err := desired.Get(ctx, contract.DesiredKey(node))
		if err != nil {
			t.Fatal(err)
		}
		touched := i < 3
		if touched != d.Value.GetRevert() || (!touched && d.Value.GetRollout() == r.GetId()) {
			t.Errorf("%s desired: revert=%v rollout=%s; want touched=%v", node, d.Value.GetRevert(), d.Value.GetRollout(), touched)
		}
	}
	f := r.GetFailures()
	if len(f) != 1 || f[0].GetNode() != "node-03" || f[0].GetFailedCheck() != "connectivity" {
		t.Fatalf("failures = %v", f)
	}
	rec, err := bad.Get(ctx, f[0].GetFingerprint())
	if err != nil || rec.Value.GetNode() != "node-03" || rec.Value.GetCheck() != "connectivity" || !strings.Contains(rec.Value.GetOutput(), "packet loss") {
		t.Fatalf("fingerprint record = %v, %v", rec.Value, err)
	}
	assertInvariants(t, s, r)
}

func TestSafeRollout_ReapplyingKnownBadIntentsIsRefusedAtRequestTime(t *testing.T) {
	s, r, broken := rollOutThenFailInWave2(t)
	ctx := context.Background()
	desired, _, bad := stores(s.env)
	before, err := desired.List(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	head := store.New(s.env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	h0, err := head.Get(ctx, contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := bad.Keys(ctx)
	fps := slices.DeleteFunc(keys, contract.IsControlKey)
	if err != nil || len(fps) != 1 {
		t.Fatalf("fingerprints recorded: %v, %v; want the wave-2 failure", fps, err)
	}

	_, err = apiclient.Apply(ctx, s.env.Conn, &sluicev1.ApplyRequest{Intents: broken, Strategy: &sluicev1.Strategy{MaxParallel: "8"}, Source: "e2e"})
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Code != contract.ErrCodeInvalid ||
		!strings.Contains(apiErr.Description, "node-03") || !strings.Contains(apiErr.Description, render.Short(fps[0])) ||
		!strings.Contains(apiErr.Description, "--retry-invalid") {
		t.Fatalf("re-applying the rolled-back intents: err = %v; want it refused naming node-03, fingerprint %s and --retry-invalid",
			err, render.Short(fps[0]))
	}
	if h1, err := head.Get(ctx, contract.KeyHead); err != nil || h1.Revision != h0.Revision {
		t.Fatalf("head rev %d → %d (%v): the refused apply stored something", h0.Revision, h1.Revision, err)
	}
	after, err := desired.List(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]uint64{}
	for _, e := range before {
		revs[e.Key] = e.Revision
	}
	for _, e := range after {
		if revs[e.Key] != e.Revision {
			t.Errorf("%s was written after the refused apply", e.Key)
		}
	}
	assertInvariants(t, s, r)

	// On purpose, it is rolled out again (and fails again on node-03).
	resp := apply(t, s.env, broken, &sluicev1.Strategy{MaxParallel: "8", RetryInvalid: true})
	if !resp.GetChanged() {
		t.Fatalf("apply with retryInvalid: %v; want a new rollout", resp)
	}
	r2 := waitRolloutEnd(t, s.env, resp.GetGeneration(), 60*time.Second)
	if r2.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK {
		t.Fatalf("the retried rollout ended %s (%s); want ROLLED_BACK (node-03 fails again)", r2.GetPhase(), r2.GetReason())
	}
}

func TestSafeRollout_FailureWithinBudgetEndsPartiallyFailed(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	var badRev atomic.Value
	in := examplesWith(t, 300)
	badRev.Store(render.RevisionID(in))
	s := startSystem(t, env, t.TempDir(), 6, failing(&badRev, "node-02"))
	waitRegistered(t, env, 6)
	resp := apply(t, env, in, &sluicev1.Strategy{MaxParallel: "2", FailureBudget: "1"})
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PARTIALLY_FAILED {
		t.Fatalf("rollout ended %s (%s); want PARTIALLY_FAILED", r.GetPhase(), r.GetReason())
	}
	if c := r.GetCounts(); c.GetProvisioned() != 5 || c.GetFailed() != 1 {
		t.Errorf("counts %v: want 5 provisioned, node-02 failed", c)
	}
	if f := r.GetFailures(); len(f) != 1 || f[0].GetNode() != "node-02" {
		t.Errorf("failures = %v", f)
	}
	assertInvariants(t, s, r)
}

// slowly makes every apply take d.
func slowly(d time.Duration) func(string, agent.Applier) agent.Applier {
	return func(_ string, a agent.Applier) agent.Applier {
		return agent.ApplierFunc(func(ctx context.Context, c *sluicev1.DesiredConfig) error {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
			return a.Apply(ctx, c)
		})
	}
}

func TestSafeRollout_NodeLeavingMidRolloutIsSkipped(t *testing.T) {
	settings := contract.DefaultSettings()
	settings.NodeLease = time.Second
	env := natstest.Start(t, settings)
	s := startSystem(t, env, t.TempDir(), 6, slowly(300*time.Millisecond))
	waitRegistered(t, env, 6)
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "1"})
	s.halt("node-05") // its lease expires while the rollout runs
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("rollout ended %s (%s); want SUCCEEDED: a node leaving is not a failure", r.GetPhase(), r.GetReason())
	}
	if c := r.GetCounts(); c.GetSkipped() != 1 || c.GetProvisioned() != 5 || c.GetFailed() != 0 {
		t.Errorf("counts %v: want node-05 skipped, 5 provisioned", c)
	}
	if sk := r.GetSkipped(); len(sk) != 1 || sk[0].GetNode() != "node-05" {
		t.Errorf("skipped = %v", sk)
	}
	assertInvariants(t, s, r)
}

func TestSafeRollout_NodeJoiningMidRolloutGetsTheTarget(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 4, slowly(200*time.Millisecond))
	waitRegistered(t, env, 4)
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "1"})
	s.startAgent(4) // node-05 joins while node-01 applies
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetTotal() != 5 || r.GetCounts().GetProvisioned() != 5 {
		t.Fatalf("rollout ended %s (%s) counts %v; want SUCCEEDED over 5 nodes", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	want := expectedFingerprints(t, env, resp.GetRevision(), map[string]map[string]string{"node-05": nodeLabels(4)})
	_, status, _ := stores(env)
	st, err := status.Get(context.Background(), "node-05")
	if err != nil || st.Value.GetFingerprint() != want["node-05"] || st.Value.GetRollout() != r.GetId() {
		t.Fatalf("node-05 status = %v, %v; want the rollout target %.12s", st.Value, err, want["node-05"])
	}
	assertInvariants(t, s, r)
}

func TestSafeRollout_CoordinatorDownLongerThanApplyDeadlineDoesNotTimeOutHealthyNodes(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 2, slowly(4*time.Second))
	waitRegistered(t, env, 2)
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "2",
		ApplyDeadline: durationpb.New(3 * time.Second), PickupDeadline: durationpb.New(3 * time.Second)})
	_, status, _ := stores(env)
	natstest.Eventually(t, 60*time.Second, "both nodes to acknowledge", func() bool {
		all, _ := status.List(context.Background(), ">")
		acked := 0
		for _, e := range all {
			if e.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONING {
				acked++
			}
		}
		return acked == 2
	})
	s.halt("coordinator")
	// The outage itself, not a wait for a condition: 2s without a leader,
	// then 2s more apply with one: 4s > the 3s deadline, while the leader
	// saw 2s of it (margin: 1s, and a late timer only shortens its share).
	time.Sleep(2 * time.Second)
	s.startCoordinator()
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetTimedOut() != 0 {
		t.Fatalf("rollout ended %s (%s) counts %v; want SUCCEEDED with no timeouts", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	assertInvariants(t, s, r)
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestSafeRollout_ControlPlaneOutageDoesNotInvalidate(t *testing.T) {
	dir, listen := t.TempDir(), freePort(t)
	env := natstest.StartAt(t, dir, listen, contract.DefaultSettings())
	s := startSystem(t, env, t.TempDir(), 6, slowly(300*time.Millisecond))
	waitRegistered(t, env, 6)
	resp := apply(t, env, examplesWith(t, 300), &sluicev1.Strategy{MaxParallel: "2"})
	_, status, bad := stores(env)
	natstest.Eventually(t, 60*time.Second, "the rollout to be under way", func() bool {
		all, _ := status.List(context.Background(), ">")
		return len(all) >= 2
	})
	// Every KV and JetStream call fails while the server is away: an
	// outage of 500ms (its length is the fault, not a wait).
	env.Server.Shutdown()
	env.Server.WaitForShutdown()
	time.Sleep(500 * time.Millisecond)
	env2 := natstest.StartAt(t, dir, listen, contract.DefaultSettings())
	r := waitRolloutEnd(t, env2, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetFailed()+r.GetCounts().GetTimedOut() != 0 {
		t.Fatalf("rollout ended %s (%s) counts %v; want SUCCEEDED with no failure", r.GetPhase(), r.GetReason(), r.GetCounts())
	}
	keys, _ := bad.Keys(context.Background())
	keys = slices.DeleteFunc(keys, contract.IsControlKey) // the term fences
	if len(keys) != 0 {
		t.Fatalf("control-plane errors invalidated fingerprints: %v", keys)
	}
	s.env = env2
	assertInvariants(t, s, r)
}
