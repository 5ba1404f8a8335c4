package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// defaultSeeds is how many seeds `go test` runs without CHAOS_SEEDS: a few,
// so `make test` stays quick; `make chaos` runs many more (docs/chaos.md).
const defaultSeeds = 2

// seeds are the seeds to run: CHAOS_SEED=s runs s alone; otherwise
// CHAOS_SEEDS=n (default 2) seeds from CHAOS_SEED_BASE (default 1), and of
// those, with CHAOS_SHARD=i/n, every n-th from the i-th (one process per
// core on virtual time: tests/chaos/virtual.sh).
func seeds(t *testing.T) []uint64 {
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a seed number, e.g. CHAOS_SEED=1234", v)
		}
		return []uint64{s}
	}
	n, base := uint64(defaultSeeds), uint64(1)
	for _, x := range []struct {
		env string
		dst *uint64
	}{{"CHAOS_SEEDS", &n}, {"CHAOS_SEED_BASE", &base}} {
		if v := os.Getenv(x.env); v != "" {
			s, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s=%q: want a number", x.env, v)
			}
			*x.dst = s
		}
	}
	shard, shards := uint64(0), uint64(1)
	if v := os.Getenv("CHAOS_SHARD"); v != "" {
		if _, err := fmt.Sscanf(v, "%d/%d", &shard, &shards); err != nil || shards == 0 || shard >= shards {
			t.Fatalf("CHAOS_SHARD=%q: want i/n with 0 <= i < n, e.g. CHAOS_SHARD=0/2", v)
		}
	}
	var out []uint64
	for i := range n {
		if i%shards == shard {
			out = append(out, base+i)
		}
	}
	return out
}

// Repro is the one command that runs seed again.
func Repro(seed uint64) string {
	return fmt.Sprintf("CHAOS_SEED=%d go test ./tests/chaos -run 'TestChaos/seed=%d$' -count=1 -v", seed, seed)
}

// TestChaos runs one seeded scenario and fault schedule per subtest and
// checks the invariants at rest. Run two at a time (-parallel 2).
func TestChaos(t *testing.T) {
	all := seeds(t)
	if virtualTime() && os.Getenv("SLUICE_TEST_SECURE") == "1" {
		t.Fatalf("%s=1 and SLUICE_TEST_SECURE=1: the secured suite runs on real time only (its server listens for TLS clients)", EnvVirtual)
	}
	var mu sync.Mutex
	var failed []string
	t.Cleanup(func() { // after every seed: the repro lines together
		if len(failed) == 0 {
			return
		}
		sort.Strings(failed)
		t.Logf("CHAOS SUMMARY: %d of %d seeds failed; reproduce each with:\n%s", len(failed), len(all), strings.Join(failed, "\n"))
	})
	for _, seed := range all {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			var why string
			if virtualTime() {
				if reason := virtualSkip(Pick(seed)); reason != "" {
					t.Skip(reason)
				}
				// One bubble at a time, none of its objects left in a pool:
				// nats.go keeps timers in a process-wide sync.Pool, and a
				// timer made in one bubble is fatal in another. Two
				// collections empty every sync.Pool. `make chaos-virtual`
				// runs a process per core instead (CHAOS_SHARD).
				runtime.GC()
				runtime.GC()
				var clock bubbleClock
				stop := watchdog(seed, &clock)
				defer func() { // a failed bubble ends this goroutine too
					t.Logf("seed %d: its clock stood still at most %s", seed, stop())
				}()
				synctest.Test(t, func(t *testing.T) {
					ticks := make(chan struct{})
					t.Cleanup(func() { close(ticks) }) // the last cleanup: the clock ticks until the bubble's end
					go clock.tick(ticks)
					inBubbleAccessTime()
					why = runSeed(t, seed)
				})
			} else {
				t.Parallel()
				why = runSeed(t, seed)
			}
			if t.Failed() {
				if why == "" {
					why = "see its output (a panic, or a failure outside the checker)"
				}
				mu.Lock()
				failed = append(failed, Repro(seed)+"   # "+why)
				mu.Unlock()
			}
		})
	}
}

// runSeed runs seed and says why it failed: the invariants broken, or
// "harness failure" when the harness could not do its part (restart a
// server, observe the system at rest) and no invariant was found broken.
func runSeed(t *testing.T, seed uint64) string {
	sc := Pick(seed)
	if !virtualTime() {
		sc = sc.onRealTime()
	}
	log := newSchedule()
	start := time.Now()
	var f *faults
	// after names the servers the schedule restarted: a read that fails
	// after them is what a harness failure most likely follows from.
	after := func() string {
		if f == nil || len(f.restarted()) == 0 {
			return " (no server was restarted)"
		}
		return " after restarting " + strings.Join(f.restarted(), ", ")
	}
	fail := func(invariants []string, details string) string {
		t.Errorf("CHAOS FAIL seed=%d invariants=%s repro: %s\n%s\n%s\nschedule:\n%s",
			seed, strings.Join(invariants, ","), Repro(seed), details, sc.Describe(), log)
		return "invariants " + strings.Join(invariants, ",")
	}
	harnessFail := func(errs ...error) string {
		var lines []string
		for _, err := range errs {
			lines = append(lines, err.Error())
		}
		t.Errorf("CHAOS HARNESS FAIL seed=%d (the harness's own failure, not a broken invariant) repro: %s\n%s\n%s\nschedule:\n%s",
			seed, Repro(seed), strings.Join(lines, "\n"), sc.Describe(), log)
		return "harness failure"
	}
	s := newSystem(t, sc, log)
	w := newWatchers(s)
	defer w.stop()
	s.start()
	// Bounds the driver and the faults; each wait inside has its own.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rctx, rcancel := context.WithTimeout(ctx, registerWithin+readPatience+10*time.Second)
	missing, err := await(rctx, registerWithin, 1, s.unregistered)
	rcancel()
	switch {
	case err != nil:
		return harnessFail(harnessErr("could not tell whether every agent registered: %w", err))
	case len(missing) > 0:
		return fail([]string{"setup"}, fmt.Sprintf("agents did not register within %s: %v", registerWithin, missing))
	}
	d := newDriver(s)
	f = &faults{sys: s, drv: d, watch: w, locks: map[string]chan struct{}{}}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); f.runAll(ctx) }()
	driveErr := d.run(ctx)
	<-faultsDone
	f.resumeOverGarbage(ctx)
	log.add("faults done")
	if driveErr != nil {
		log.add("driver: %v", driveErr)
	}
	s.findingsMu.Lock()
	harness := slices.Clone(s.harness)
	s.findingsMu.Unlock()
	if he := (*harnessError)(nil); errors.As(driveErr, &he) {
		harness = append(harness, driveErr)
		driveErr = nil
	}
	sctx, scancel := context.WithTimeout(context.Background(), settleWithin+readPatience+10*time.Second)
	defer scancel()
	busy, err := s.settle(sctx, settleWithin)
	if err != nil {
		return harnessFail(append(harness, harnessErr("could not tell whether the system is at rest%s: %w", after(), err))...)
	}
	log.add("settled (%d things busy)", len(busy))
	octx, ocancel := context.WithTimeout(context.Background(), 2*readPatience)
	defer ocancel()
	o, err := s.observe(octx, w, d, len(f.restarted()) > 0, busy)
	if err != nil {
		return harnessFail(append(harness, harnessErr("could not observe the system at rest%s: %w", after(), err))...)
	}
	vs := Check(o)
	s.findingsMu.Lock()
	vs = append(vs, s.findings...)
	s.findingsMu.Unlock()
	if driveErr != nil {
		vs = append(vs, Violation{Invariant: "I2", Detail: driveErr.Error()})
	}
	// The store-loss fault runs after a clean run only: its violations are
	// then its own (storeloss.go). The watchers stop first: the records
	// they follow are wiped.
	if sc.StoreLoss && len(vs) == 0 && len(harness) == 0 {
		w.stop()
		lctx, lcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		lv, err := s.loseStore(lctx, d)
		lcancel()
		if err != nil {
			return harnessFail(err)
		}
		vs = append(vs, lv...)
	}
	if len(vs) > 0 {
		var names []string
		var lines []string
		seen := map[string]bool{}
		for _, v := range vs {
			if !seen[v.Invariant] {
				seen[v.Invariant] = true
				names = append(names, v.Invariant)
			}
			lines = append(lines, "  "+v.String())
		}
		details := "violations:\n" + strings.Join(lines, "\n")
		if len(harness) > 0 {
			// Found with the harness failing too: they may follow from it.
			var hl []string
			for _, err := range harness {
				hl = append(hl, "  "+err.Error())
			}
			details += "\nthe harness failed too (the violations may follow from it):\n" + strings.Join(hl, "\n")
		}
		return fail(names, details)
	}
	if len(harness) > 0 {
		return harnessFail(harness...)
	}
	t.Logf("seed %d passed in %s: %d rollouts, %d faults", seed, time.Since(start).Round(10*time.Millisecond), len(o.Rollouts), len(sc.Faults))
	return ""
}
