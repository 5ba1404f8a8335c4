package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, unmounted
// at cleanup (after whatever the test registers later has stopped). It
// skips the test when the mount is not permitted (not root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("needs CAP_SYS_ADMIN to mount a tmpfs (run as root): %v", err)
		}
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes path until the file system holding it has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("fill %s: %v", path, err)
		}
	}
}

// The store's disk fills up under a running plane, then space is freed:
// with no restart of the server or of any service, the coordinator leads
// again, an apply lands and its rollout completes.
// fullFor is how long the disk stays full before the apply that fails on it.
const fullFor = 3 * time.Second

func TestFullStore_SpaceFreed_PlaneResumesWithoutRestart(t *testing.T) {
	dir := mountTmpfs(t, "64m")
	set := contract.DefaultSettings()
	set.EventsMaxBytes = 8 << 20 // JetStream reserves it: the default 1 GiB does not fit
	env := natstest.StartAt(t, filepath.Join(dir, "data"), "127.0.0.1:-1", set)
	const n = 5
	s := startSystem(t, env, t.TempDir(), n, nil)
	waitRegistered(t, env, n)
	ctx := context.Background()
	lease := func() uint64 {
		e, err := env.Buckets.Leases.Get(ctx, contract.LeaseCoordinator)
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	natstest.Eventually(t, 30*time.Second, "a coordinator to lead", func() bool { return lease() > 0 })

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	intents, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(timeout time.Duration) (*sluicev1.ApplyResponse, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{Intents: intents, Strategy: &sluicev1.Strategy{MaxParallel: "5"}, Source: "e2e"})
	}
	// While the disk is full the lease stops moving and an apply fails.
	stuck := lease()
	time.Sleep(fullFor) // a lease is 2 s: renewals are due in that time
	if _, err := apply(10 * time.Second); err == nil {
		t.Fatal("an apply succeeded on a full disk")
	} else {
		t.Logf("apply on a full disk: %v", err)
	}
	if got := lease(); got != stuck {
		t.Logf("the lease moved on a full disk (revision %d → %d)", stuck, got)
	}
	stuck = lease()

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	// Bound on "resumes at all": the retries of every service back off to
	// tens of seconds, so two minutes is margin, not a target.
	const bound = 2 * time.Minute
	natstest.Eventually(t, bound, "the server's streams to be rid of their write errors", func() bool {
		for _, e := range env.Server.Healthz(&server.HealthzOptions{Details: true}).Errors {
			if strings.Contains(e.Error, "write error") {
				return false
			}
		}
		return env.Server.JetStreamEnabled()
	})
	healed := time.Since(freed)
	natstest.Eventually(t, bound, "the coordinator to renew its lease", func() bool { return lease() > stuck })
	leads := time.Since(freed)
	var resp *sluicev1.ApplyResponse
	natstest.Eventually(t, bound, "an apply to land", func() bool {
		resp, err = apply(5 * time.Second)
		return err == nil
	})
	applied := time.Since(freed)
	r := waitRolloutEnd(t, env, resp.GetGeneration(), bound)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED || r.GetCounts().GetProvisioned() != n {
		t.Fatalf("rollout ended %s (%s), counts %v; want SUCCEEDED on %d nodes", r.GetPhase(), r.GetReason(), r.GetCounts(), n)
	}
	done := time.Since(freed)
	assertFleetRuns(t, s, expectedFingerprints(t, env, resp.GetRevision(), s.labels))
	t.Logf("after space was freed: the server's streams were rid of their write errors in %s, the coordinator renewed its lease in %s, an apply landed in %s, its rollout on %d nodes succeeded in %s",
		healed.Round(time.Millisecond), leads.Round(time.Millisecond), applied.Round(time.Millisecond), n, done.Round(time.Millisecond))
}
