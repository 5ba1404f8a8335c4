package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func TestApply_StrategyFlagsReachTheHead(t *testing.T) {
	s := startSystem(t, 0)
	f := writeFile(t, "tenant-a.yaml", tenantA)
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", f, "--max-parallel", "5", "--first-wave", "2", "--wave-growth", "3",
		"--bake-time", "30s", "--failure-domain", "zone", "--failure-budget", "10%", "--apply-deadline", "2m",
		"--pickup-deadline", "4m", "--progress-deadline", "2h", "--retry-invalid")
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	st := headStrategy(t, s.URL())
	if st.GetMaxParallel() != "5" || st.GetFirstWave() != 2 || st.GetWaveGrowth() != 3 || st.GetBakeTime().AsDuration() != 30*time.Second ||
		st.GetFailureDomain() != "zone" || st.GetFailureBudget() != "10%" || st.GetApplyDeadline().AsDuration() != 2*time.Minute ||
		st.GetPickupDeadline().AsDuration() != 4*time.Minute || st.GetProgressDeadline().AsDuration() != 2*time.Hour || !st.GetRetryInvalid() {
		t.Fatalf("head strategy = %v", st)
	}
}

func TestApply_InvalidStrategy_IsRejectedWithTheField(t *testing.T) {
	s := startSystem(t, 0)
	f := writeFile(t, "tenant-a.yaml", tenantA)
	code, _, stderr := sluice(t, s.URL(), "apply", "-f", f, "--bake-time", "1m")
	if code != 1 || !strings.Contains(stderr, "strategy.bakeTime") || !strings.Contains(stderr, "nothing was stored") {
		t.Fatalf("exit code %d, stderr %q; want 1 naming strategy.bakeTime", code, stderr)
	}
	code, _, stderr = sluice(t, s.URL(), "apply", "-f", f, "--apply-deadline", "soon")
	if code != 2 || !strings.Contains(stderr, "apply-deadline") {
		t.Fatalf("exit code %d, stderr %q; want a usage error naming --apply-deadline", code, stderr)
	}
}

func TestDelete_StrategyFlagsReachTheHead(t *testing.T) {
	s := startSystem(t, 0)
	if code, _, stderr := sluice(t, s.URL(), "apply", "-f", writeFile(t, "tenant-a.yaml", tenantA)); code != 0 {
		t.Fatalf("apply: exit code %d: %s", code, stderr)
	}
	code, _, stderr := sluice(t, s.URL(), "delete", "routingtable/mgmt", "--failure-domain", "rack", "--bake-time", "0s", "--progress-deadline", "30m")
	if code != 0 {
		t.Fatalf("delete: exit code %d: %s", code, stderr)
	}
	st := headStrategy(t, s.URL())
	if st.GetFailureDomain() != "rack" || st.GetBakeTime() == nil || st.GetBakeTime().AsDuration() != 0 ||
		st.GetProgressDeadline().AsDuration() != 30*time.Minute || st.GetApplyDeadline() != nil {
		t.Fatalf("head strategy = %v", st)
	}
	code, _, stderr = sluice(t, s.URL(), "delete", "routingtable/mgmt", "--pickup-deadline", "-")
	if code != 2 || !strings.Contains(stderr, "pickup-deadline") {
		t.Fatalf("exit code %d, stderr %q; want a usage error naming --pickup-deadline", code, stderr)
	}
}

// headStrategy reads the strategy of revisions/head.
func headStrategy(t *testing.T, url string) *sluicev1.Strategy {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), contract.BucketRevisions)
	if err != nil {
		t.Fatal(err)
	}
	h, err := store.New(kv, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	return h.Value.GetStrategy()
}
