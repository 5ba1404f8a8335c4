package chaos

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// defaultSeeds is how many seeds `go test` runs without CHAOS_SEEDS: a few,
// so `make test` stays quick; `make chaos` runs many more (docs/chaos.md).
const defaultSeeds = 2

// seeds are the seeds to run: CHAOS_SEED=s runs s alone; otherwise
// CHAOS_SEEDS=n (default 2) seeds from CHAOS_SEED_BASE (default 1).
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
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
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
			t.Parallel()
			runSeed(t, seed)
			if t.Failed() {
				mu.Lock()
				failed = append(failed, Repro(seed))
				mu.Unlock()
			}
		})
	}
}

func runSeed(t *testing.T, seed uint64) {
	sc := Pick(seed)
	log := newSchedule()
	start := time.Now()
	fail := func(invariants []string, details string) {
		t.Errorf("CHAOS FAIL seed=%d invariants=%s repro: %s\n%s\n%s\nschedule:\n%s",
			seed, strings.Join(invariants, ","), Repro(seed), details, sc.Describe(), log)
	}
	s := newSystem(t, sc, log)
	w := newWatchers(s)
	defer w.stop()
	s.start()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if busy := s.settleRegistered(ctx, 20*time.Second); busy != "" {
		fail([]string{"setup"}, busy)
		return
	}
	d := newDriver(s)
	f := &faults{sys: s, drv: d, watch: w, locks: map[string]*sync.Mutex{}}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); f.runAll(ctx) }()
	driveErr := d.run(ctx)
	<-faultsDone
	log.add("faults done")
	if driveErr != nil {
		log.add("driver: %v", driveErr)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer scancel()
	busy := s.settle(sctx, 20*time.Second)
	log.add("settled (%d things busy)", len(busy))
	octx, ocancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ocancel()
	o, err := s.observe(octx, w, d, f.restarts, busy)
	if err != nil {
		fail([]string{"observe"}, err.Error())
		return
	}
	vs := Check(o)
	s.findingsMu.Lock()
	vs = append(vs, s.findings...)
	s.findingsMu.Unlock()
	if driveErr != nil {
		vs = append(vs, Violation{Invariant: "I2", Detail: driveErr.Error()})
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
		fail(names, "violations:\n"+strings.Join(lines, "\n"))
		return
	}
	t.Logf("seed %d passed in %s: %d rollouts, %d faults", seed, time.Since(start).Round(10*time.Millisecond), len(o.Rollouts), len(sc.Faults))
}
