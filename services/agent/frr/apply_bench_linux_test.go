package frr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
)

// benchConfig is fiftyRoutes with n1's prefixes imported by its first
// route (so that the route check has a route to see), its last route's
// community comm: two values of comm make two configs whose files differ
// in one route map entry.
func benchConfig(comm string) *sluicev1.DesiredConfig {
	cfg := fiftyRoutes()
	first := cfg.Intents[0].GetVrfRoute()
	first.Import = append(first.Import, items("198.51.100.0/24", "203.0.113.0/24")...)
	cfg.Intents[len(cfg.Intents)-1].GetVrfRoute().Community = comm
	return desiredOf("n2", "bench-"+comm, cfg.Intents...)
}

// stepTimes are one apply's steps, as the agent runs them: Validate (vtysh
// -C), Apply (frr-reload, clear bgp soft, settle) and the checks.
type stepTimes struct{ validate, apply, check, total, cpu time.Duration }

// childCPU is the processor time (user and system) of this process's
// children that ended so far: vtysh and frr-reload.py, once waited for
// (FRR's daemons, children too, count only when they exit).
func childCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkApply_50RoutesIn10VRFs measures the FRR applier's
// apply-to-checked time on a node for the config of 50 VRF routes in 10
// VRFs (vrfs: off, the host kernel's layout: every route in the
// neighbours' policy), against real FRR: n2 of a two-node fabric, n1 an
// eBGP peer announcing two prefixes. One operation is Validate + Apply +
// the checks the agent would run (bgp with at least one prefix, route
// 198.51.100.0/24 in FRR and n2's kernel), with the applier's default
// settle:
//
//   - changed: each operation's config differs from the last (two configs
//     alternate, differing in one route map entry's community), so each
//     one validates and reloads;
//   - same: the config last applied, again (nothing to validate or
//     reload; the checks still run).
//
// Each reports p50 and p99 of the operation (ms) and the p50 of each
// step; reload-only is frr-reload.py alone on the same two files, for
// where the time goes. make bench-frr runs it and prints a BENCH line.
func BenchmarkApply_50RoutesIn10VRFs(b *testing.B) {
	frrtest.Require(b)
	hostnettest.RequireNetAdmin(b)
	fab := hostnettest.NewFabric(b, 2)
	frrtest.Start(b, fab.Nodes[0].Name, frrtest.Options{Config: n1Config})
	n2 := frrtest.Start(b, fab.Nodes[1].Name, frrtest.Options{})
	ns2 := fab.Nodes[1].NS
	host, err := os.Hostname()
	if err != nil {
		b.Fatal(err)
	}
	fa, err := frr.NewApplier(frr.ApplierConfig{FRR: n2.Instance, Settings: node2(), Hostname: host, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	route, err := frr.ParseRoute("198.51.100.0/24", n2.Instance)
	if err != nil {
		b.Fatal(err)
	}
	checks := []agent.Check{frr.BGP{FRR: n2.Instance, MinPrefixes: 1}, inNamespace{ns2, route}}
	configs := [2]*sluicev1.DesiredConfig{benchConfig("65000:100"), benchConfig("65000:200")}

	var applied *sluicev1.DesiredConfig
	op := func(d *sluicev1.DesiredConfig) stepTimes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var st stepTimes
		cpu, start := childCPU(b), time.Now()
		if err := fa.Validate(ctx, d); err != nil {
			b.Fatalf("validate %s: %v", d.GetRevision(), err)
		}
		st.validate = time.Since(start)
		if err := fa.Apply(ctx, d); err != nil {
			b.Fatalf("apply %s: %v", d.GetRevision(), err)
		}
		st.apply = time.Since(start) - st.validate
		for _, c := range checks {
			cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
			out, err := c.Run(cctx, agent.CheckEnv{})
			ccancel()
			if err != nil {
				b.Fatalf("check %s after %s: %v\n%s", c.Name(), d.GetRevision(), err, out)
			}
		}
		st.total = time.Since(start)
		applied = d
		st.check = st.total - st.validate - st.apply
		st.cpu = childCPU(b) - cpu
		return st
	}
	// The first apply after the daemons start waits for the session.
	op(configs[0])

	var lines []benchFigures
	b.Run("changed", func(b *testing.B) {
		load := loadAvg()
		reloads := fa.Reloads()
		var runs []stepTimes
		i := 1
		for b.Loop() {
			runs = append(runs, op(configs[i%2]))
			i++
		}
		if got := fa.Reloads() - reloads; got != len(runs) {
			b.Fatalf("%d reloads in %d operations of a changed config, want one each", got, len(runs))
		}
		lines = append(lines, report(b, "changed", runs, true, load))
	})
	b.Run("same", func(b *testing.B) {
		load := loadAvg()
		reloads := fa.Reloads()
		var runs []stepTimes
		for b.Loop() {
			runs = append(runs, op(applied))
		}
		if got := fa.Reloads() - reloads; got != 0 {
			b.Fatalf("%d reloads in %d operations of the same config, want none", got, len(runs))
		}
		lines = append(lines, report(b, "same", runs, true, load))
	})
	// frr-reload.py alone on the same two files, for where the time goes
	// (last: the applier's memory of what it reloaded is stale after it).
	b.Run("reload-only", func(b *testing.B) {
		load := loadAvg()
		var files [2]string
		for i, d := range configs {
			file, err := fa.File(d.GetConfig())
			if err != nil {
				b.Fatal(err)
			}
			files[i] = confFileRaw(b, file)
		}
		var runs []stepTimes
		i := 1
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cpu, start := childCPU(b), time.Now()
			_, err := n2.Reload(ctx, files[i%2])
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			runs = append(runs, stepTimes{total: time.Since(start), cpu: childCPU(b) - cpu})
			i++
		}
		lines = append(lines, report(b, "reload-only", runs, false, load))
	})
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			b.Fatal(err)
		}
		// The line make bench-frr prints.
		fmt.Printf("BENCH %s\n", j)
	}
}

// benchFigures is one case's BENCH line.
type benchFigures struct {
	Bench      string  `json:"bench"`
	Case       string  `json:"case"`
	Operations int     `json:"operations"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	GoalP50ms  float64 `json:"goal_p50_ms,omitempty"`
	GoalMs     float64 `json:"goal_ms,omitempty"`
	// The steps' p50s (changed only).
	ValidateP50ms float64 `json:"validate_p50_ms,omitempty"`
	ApplyP50ms    float64 `json:"apply_p50_ms,omitempty"`
	CheckP50ms    float64 `json:"check_p50_ms,omitempty"`
	SettleMs      float64 `json:"settle_ms,omitempty"`
	// CPUP50ms is the p50 of the processor time vtysh and frr-reload.py
	// used in one operation (wall time on a loaded machine is mostly
	// waiting for a core).
	CPUP50ms float64 `json:"cpu_p50_ms"`
	// Load is the 1-minute load average at the start and the end of the
	// case (/proc/loadavg): on 2 cores, above 2 the wall times wait.
	Load [2]string `json:"load"`
}

// report reports runs' p50 and p99 (and with steps each step's p50) as
// metrics of b and returns them as a BENCH line's figures.
func report(b *testing.B, name string, runs []stepTimes, steps bool, load string) benchFigures {
	pick := func(f func(stepTimes) time.Duration) []time.Duration {
		out := make([]time.Duration, len(runs))
		for i, r := range runs {
			out[i] = f(r)
		}
		slices.Sort(out)
		return out
	}
	total := pick(func(s stepTimes) time.Duration { return s.total })
	fig := benchFigures{Bench: "frr-apply-50-routes-10-vrfs", Case: name, Operations: len(runs),
		P50ms: ms(quantile(total, 0.50)), P99ms: ms(quantile(total, 0.99)), Load: [2]string{load, loadAvg()}}
	b.ReportMetric(fig.P50ms, "p50-ms")
	b.ReportMetric(fig.P99ms, "p99-ms")
	fig.CPUP50ms = ms(quantile(pick(func(s stepTimes) time.Duration { return s.cpu }), 0.5))
	b.ReportMetric(fig.CPUP50ms, "cpu-p50-ms")
	if steps {
		fig.ValidateP50ms = ms(quantile(pick(func(s stepTimes) time.Duration { return s.validate }), 0.5))
		fig.ApplyP50ms = ms(quantile(pick(func(s stepTimes) time.Duration { return s.apply }), 0.5))
		fig.CheckP50ms = ms(quantile(pick(func(s stepTimes) time.Duration { return s.check }), 0.5))
		if name == "changed" {
			fig.SettleMs = ms(frr.DefaultSettle)
		}
		b.ReportMetric(fig.ValidateP50ms, "validate-p50-ms")
		b.ReportMetric(fig.ApplyP50ms, "apply-p50-ms")
		b.ReportMetric(fig.CheckP50ms, "check-p50-ms")
	}
	switch name {
	case "changed":
		fig.GoalP50ms = 1500
	case "same":
		fig.GoalMs = 100
	}
	return fig
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// loadAvg is the 1-minute load average ("" if unreadable).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
