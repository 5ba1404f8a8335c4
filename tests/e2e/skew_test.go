package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// TestVersionSkew_AnAgentTooOldForTheConfig_IsNeverBlamedForIt covers issue
// 38 item 2 with real agents: node-02's agent plays one of the baseline
// release (its presence states no config features). Before, a rollout using
// --bake-checks was written to it, it could not decode it, and the node was
// timed out at the pickup deadline; the good fingerprint was recorded
// invalid (timed-out), and a later plain apply of the same content was
// refused. Now that apply is refused at request time, naming node-02, its
// version and the feature, and nothing is stored (the coordinator's own
// refusal, before it touches any node, is the decider's tables' to cover:
// it holds for an agent that registers after the apply was accepted);
// nothing is recorded invalid; the
// same content applied plainly reaches every node, node-02 included; and
// with --skip-incompatible a bake-checked rollout skips node-02 and
// succeeds on the others.
func TestVersionSkew_AnAgentTooOldForTheConfig_IsNeverBlamedForIt(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	s := (&system{t: t, env: env, dir: t.TempDir(), features: map[string][]string{"node-02": {}}}).start(3)
	waitRegistered(t, env, 3)
	bake := func(skip bool) *sluicev1.Strategy {
		return &sluicev1.Strategy{MaxParallel: "3", FirstWave: 1, BakeTime: durationpb.New(time.Second), BakeChecks: 1,
			BakeCheckInterval: durationpb.New(200 * time.Millisecond), SkipIncompatible: skip}
	}
	first := apply(t, env, examplesWith(t, 400), &sluicev1.Strategy{MaxParallel: "3"})
	if r := waitRolloutEnd(t, env, first.GetGeneration(), 60*time.Second); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("first rollout: %s %s", r.GetPhase(), r.GetReason())
	}

	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err := apiclient.Apply(actx, env.Conn, &sluicev1.ApplyRequest{Intents: examplesWith(t, 401), Strategy: bake(false), Source: "e2e"})
	acancel()
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid {
		t.Fatalf("bake-checked apply: %v; want refused (%s) at request time", err, contract.ErrCodeInvalid)
	}
	for _, want := range []string{"node-02: its agent e2e does not read config feature(s) " + contract.FeatureBakeChecks, "nothing was stored"} {
		if !strings.Contains(ae.Description, want) {
			t.Errorf("refusal %q does not say %q", ae.Description, want)
		}
	}
	noneRecordedInvalid(t, env)

	// The same content, applied plainly: every node reads it.
	plain := apply(t, env, examplesWith(t, 401), &sluicev1.Strategy{MaxParallel: "3"})
	r := waitRolloutEnd(t, env, plain.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != 3 {
		t.Fatalf("plain rollout of the same content ended %s (%s), counts %v; want SUCCEEDED on all 3", r.GetPhase(), r.GetReason(), r.GetCounts())
	}

	skipped := apply(t, env, examplesWith(t, 402), bake(true))
	r = waitRolloutEnd(t, env, skipped.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || !strings.Contains(r.GetReason(), "cannot read") {
		t.Fatalf("rollout with --skip-incompatible ended %s (%s); want SUCCEEDED, saying why node-02 was skipped", r.GetPhase(), r.GetReason())
	}
	if c := r.GetCounts(); c.GetProvisioned() != 2 || c.GetIncompatible() != 1 || c.GetFailed() != 0 {
		t.Errorf("counts %v; want node-01, node-03 provisioned and node-02 skipped as incompatible", c)
	}
	if sk := r.GetSkipped(); len(sk) != 1 || sk[0].GetNode() != "node-02" || sk[0].GetResult() != sluicev1.NodeResult_NODE_RESULT_INCOMPATIBLE {
		t.Errorf("skipped %v; want node-02, incompatible", sk)
	}
	noneRecordedInvalid(t, env)
	// Once the revision is in force, node-02 is a node outside the rollout
	// running an older config: it gets the config in force as such a node
	// does, without the bake checks it cannot read (docs/rollouts.md).
	desired, status, _ := stores(env)
	ctx := context.Background()
	// margin: the poll ends as soon as node-02 reports; an apply takes milliseconds.
	natstest.Eventually(t, 30*time.Second, "node-02 to run the config in force", func() bool {
		d, derr := desired.Get(ctx, contract.DesiredKey("node-02"))
		st, serr := status.Get(ctx, "node-02")
		return derr == nil && serr == nil && d.Value.GetRevision() == skipped.GetRevision() &&
			st.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && st.Value.GetFingerprint() == d.Value.GetFingerprint()
	})
	if d, _ := desired.Get(ctx, contract.DesiredKey("node-02")); d.Value.GetBakeChecks() != nil || len(d.Value.GetFeatures()) != 0 {
		t.Errorf("node-02 was written %v; want no feature its agent lacks", d.Value)
	}
	noneRecordedInvalid(t, env)
	assertInvariants(t, s, r)
}

// noneRecordedInvalid fails t if any fingerprint is recorded invalid.
func noneRecordedInvalid(t *testing.T, env *natstest.Env) {
	t.Helper()
	_, _, bad := stores(env)
	keys, err := bad.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !contract.IsControlKey(k) {
			rec, _ := bad.Get(context.Background(), k)
			t.Errorf("fingerprint %.12s recorded invalid: %v", k, rec.Value)
		}
	}
}
