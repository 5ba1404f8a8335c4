package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// countingCheck passes until it has run fails-at times on a config with
// fingerprint fp (it counts its runs in dir/runs), then fails with output.
func countingCheck(dir, fp string, failsAt int) agent.CheckSpec {
	runs := filepath.Join(dir, "runs")
	return agent.CheckSpec{Check: agent.ExecCheck{Label: "uplink", Command: `grep -q ` + fp + ` "$SLUICE_CONFIG" || exit 0
n=$(cat ` + runs + ` 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + runs + `
if [ ` + "$n" + ` -ge ` + strconv.Itoa(failsAt) + ` ]; then echo "ping 10.0.0.1: 100% packet loss (run $n)"; exit 1; fi`}}
}

// readConfigIfAny decodes the DesiredConfig JSON in path, nil when there is
// none (yet) or it does not decode.
func readConfigIfAny(path string) *sluicev1.DesiredConfig {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	got := &sluicev1.DesiredConfig{}
	if store.Unmarshal(b, got) != nil {
		return nil
	}
	return got
}

func noMarker(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, agent.ApplyingFile))
	return errors.Is(err, os.ErrNotExist)
}

func withBake(d *sluicev1.DesiredConfig, passes uint32, every, bake time.Duration) *sluicev1.DesiredConfig {
	d.BakeChecks = &sluicev1.BakeChecks{Passes: passes, Interval: durationpb.New(every), For: durationpb.New(bake)}
	return d
}

func TestAgent_BakeChecks_ReRunsTheChecksAndReportsEachPass_ThenMakesItLastGood(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	good, next := desiredConfig("n1", "one", 100), withBake(desiredConfig("n1", "two", 200), 3, 20*time.Millisecond, 0)
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(path), Checks: []agent.CheckSpec{countingCheck(dir, next.Fingerprint, 100)}})
	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	f.writeDesired(t, next)
	f.waitStatus(t, "n1", "Provisioned next with 3 passed re-runs", func(s *sluicev1.NodeStatus) bool {
		return provisioned(next.Fingerprint)(s) && s.GetBakePasses() == 3
	})
	natstest.Eventually(t, waitFor, "next is last-good once baked, and the marker gone", func() bool {
		got := readConfigIfAny(filepath.Join(dir, agent.LastGoodFile))
		return got != nil && proto.Equal(got, next) && noMarker(dir)
	})
	if n := countEvents(t, f, "n1", agent.EventNodeBakeCheckPassed); n != 3 {
		t.Fatalf("%d NodeBakeCheckPassed events, want 3", n)
	}
}

func TestAgent_BakeChecks_AFailingReRun_RestoresTheLastGoodBeforeItAndReportsInvalid(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	good, bad := desiredConfig("n1", "one", 100), withBake(desiredConfig("n1", "two", 200), 5, 20*time.Millisecond, time.Minute)
	// The check passes after the apply (run 1) and the first re-run (run
	// 2), then fails.
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(path), Checks: []agent.CheckSpec{countingCheck(dir, bad.Fingerprint, 3)}})
	f.writeDesired(t, good)
	f.waitStatus(t, "n1", "Provisioned good", provisioned(good.Fingerprint))

	f.writeDesired(t, bad)
	st := f.waitStatus(t, "n1", "Invalid bad after a failed re-run", invalid(bad.Fingerprint))
	if st.GetFailedCheck() != "uplink" || !strings.Contains(st.GetCheckOutput(), "100% packet loss (run 3)") ||
		st.GetAppliedFingerprint() != good.Fingerprint || !strings.Contains(st.GetMessage(), "re-run 2 while baking") ||
		!strings.Contains(st.GetMessage(), "restored last-good "+render.Short(good.Fingerprint)) {
		t.Fatalf("status = %v, want Invalid by uplink on re-run 2 with its output, good restored", st)
	}
	for _, file := range []string{path, filepath.Join(dir, agent.LastGoodFile)} {
		if got := readConfig(t, file); !proto.Equal(got, good) {
			t.Fatalf("%s holds %v, want the last-good before the bake %v", file, got, good)
		}
	}
	assertNoMarker(t, dir)
}

// A control-plane pause is acknowledged while the node bakes: between its
// re-runs the worker is idle (a bake may last many minutes), and no re-run
// starts while paused.
func TestAgent_BakeChecks_APauseWhileBaking_IsAcknowledgedAtOnce(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	dir := t.TempDir()
	d := withBake(desiredConfig("n1", "one", 100), 1000, time.Second, time.Hour)
	f.start(t, agent.Config{Node: "n1", StateDir: dir, Applier: agent.NewFileApplier(filepath.Join(dir, "config.json")),
		Checks: []agent.CheckSpec{countingCheck(dir, d.Fingerprint, 1000)}})
	f.writeDesired(t, d)
	f.waitStatus(t, "n1", "provisioned, baking", provisioned(d.Fingerprint))
	b, err := store.Marshal(&sluicev1.PauseRequest{Paused: true, Generation: 1, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, f, contract.BucketControl, contract.KeyPause, b)
	natstest.Eventually(t, 10*time.Second, "the presence to acknowledge pause generation 1 while baking", func() bool {
		p, err := f.nodes.Get(context.Background(), "n1")
		return err == nil && p.Value.GetPause().GetGeneration() == 1 && p.Value.GetPause().GetPaused()
	})
}
