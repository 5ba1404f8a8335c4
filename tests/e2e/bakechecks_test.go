package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// TestBakeChecks_AReRunFailingDuringTheBake_FailsTheWaveAndReverts: with
// --bake-checks the agents re-run their checks while the first wave bakes;
// on node-02 the config with routing table 401 passes its apply's check and
// the first re-run, then the link goes (the second re-run fails). Its agent
// restores last-good and reports Invalid; the coordinator fails the node as
// a failed apply — fingerprint recorded with the check's output — and
// reverts the wave; the second wave never starts.
func TestBakeChecks_AReRunFailingDuringTheBake_FailsTheWaveAndReverts(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	runs := t.TempDir()
	flaky := agent.CheckSpec{Check: agent.ExecCheck{Label: "connectivity", Command: `[ "$SLUICE_NODE" = node-02 ] && grep -q '"tableId": *401' "$SLUICE_CONFIG" || exit 0
f=` + filepath.Join(runs, "node-02") + `; n=$(cat $f 2>/dev/null || echo 0); n=$((n+1)); echo $n > $f
if [ $n -ge 3 ]; then echo "ping 10.0.0.1: 100% packet loss (run $n)"; exit 1; fi`}}
	s := startSystem(t, env, t.TempDir(), 4, nil, flaky)
	waitRegistered(t, env, 4)
	good := apply(t, env, examplesWith(t, 400), &sluicev1.Strategy{MaxParallel: "4"})
	if r := waitRolloutEnd(t, env, good.GetGeneration(), 60*time.Second); r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("first rollout: %s %s", r.GetPhase(), r.GetReason())
	}

	resp := apply(t, env, examplesWith(t, 401), &sluicev1.Strategy{MaxParallel: "2", FirstWave: 2,
		BakeTime: durationpb.New(30 * time.Second), BakeChecks: 5, BakeCheckInterval: durationpb.New(200 * time.Millisecond)})
	r := waitRolloutEnd(t, env, resp.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK || !strings.Contains(r.GetReason(), "node-02") {
		t.Fatalf("rollout ended %s (%s); want ROLLED_BACK naming node-02", r.GetPhase(), r.GetReason())
	}
	f := r.GetFailures()
	if len(f) != 1 || f[0].GetNode() != "node-02" || f[0].GetFailedCheck() != "connectivity" || !strings.Contains(f[0].GetMessage(), "re-run") {
		t.Fatalf("failures = %v; want node-02's connectivity re-run", f)
	}
	if c := r.GetCounts(); c.GetReverted() != 2 || c.GetNotStarted() != 2 {
		t.Errorf("counts %v: want wave 1 (node-01, node-02) reverted and wave 2 never started", c)
	}
	ctx := context.Background()
	_, _, bad := stores(env)
	rec, err := bad.Get(ctx, f[0].GetFingerprint())
	if err != nil || rec.Value.GetNode() != "node-02" || rec.Value.GetCheck() != "connectivity" || !strings.Contains(rec.Value.GetOutput(), "packet loss (run 3)") {
		t.Fatalf("fingerprint record = %v, %v; want node-02's connectivity with its output", rec.Value, err)
	}
	assertInvariants(t, s, r)
}
