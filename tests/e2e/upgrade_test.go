package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/testproc"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// baselineRelease is the commit whose agents are the oldest the control
// plane supports (docs/deploy.md, "Version skew and upgrades").
const baselineRelease = "8c96385"

// buildBaselineAgent builds the agent of baselineRelease from this
// repository's history (git archive into a temporary directory, go build
// there) and returns the binary's path.
func buildBaselineAgent(t *testing.T) string {
	t.Helper()
	src, bin := t.TempDir(), filepath.Join(t.TempDir(), "sluice-agent")
	archive := exec.Command("sh", "-c", `git -C "$REPO" archive --format=tar "$COMMIT" | tar -x -C "$DEST"`)
	archive.Env = append(os.Environ(), "REPO=../..", "COMMIT="+baselineRelease, "DEST="+src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s of this repository (the test needs its git history): %v\n%s", baselineRelease, err, out)
	}
	build := exec.Command("go", "build", "-o", bin, "./services/agent/cmd/sluice-agent")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the agent of %s: %v\n%s", baselineRelease, err, out)
	}
	return bin
}

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
	bin := buildBaselineAgent(t)
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
