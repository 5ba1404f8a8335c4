// Command sluice-bench runs one measured rollout over simulated agents and
// prints the result as its last line: BENCH {json}. The coordinator runs in
// a child process (this binary with --role coordinator) so that its heap is
// measured on its own.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
	"github.com/sluicehq/sluice/tests/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("sluice-bench", flag.ContinueOnError)
	nodes := fs.Int("nodes", 1000, "simulated agents")
	maxPar := fs.Int("max-parallel", 50, "rollout maxParallel")
	applyMS := fs.Int("apply-ms", 100, "simulated apply latency in milliseconds")
	failWave := fs.Int("fail-wave", 2, "after the measured rollout, roll out a change in waves of 10, 20, 40 … nodes whose first node of this wave fails, and measure the revert (0: skip)")
	lease := fs.Duration("leader-lease", contract.DefaultSettings().LeaderLease, "the coordinators' leader lease (the failover scenario's standby takes over after it expires)")
	failover := fs.Bool("failover", true, "after the other scenarios, roll out a change under two coordinators, kill the leader when half the nodes are written and measure the takeover")
	perConn := fs.Int("agents-per-conn", 250, "simulated agents sharing one NATS connection")
	role := fs.String("role", "bench", "bench, or coordinator (internal: the measured child process)")
	server := fs.String("server", "", "NATS URL (with --role coordinator)")
	logLevel := fs.String("log-level", "error", "log level of the services")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process to the file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := logging.New(os.Stderr, *logLevel, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *role == "coordinator" {
		return runCoordinator(ctx, *server, *lease, log)
	}
	res, err := bench.Run(ctx, bench.Options{
		Nodes: *nodes, MaxParallel: *maxPar, ApplyLatency: time.Duration(*applyMS) * time.Millisecond, AgentsPerConn: *perConn, FailWave: *failWave,
		LeaderLease: *lease, Failover: *failover, StartCoordinator: childCoordinator(*logLevel), Log: log,
	})
	line, lerr := res.Line()
	if lerr != nil {
		fmt.Fprintf(os.Stderr, "bench: %v (%+v)\n", lerr, res)
		return 1
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		fmt.Println(line)
		return 1
	}
	fmt.Println(line)
	return 0
}

// childCoordinator starts this binary as the coordinator process.
func childCoordinator(logLevel string) func(url string, lease time.Duration) (func() (float64, error), error) {
	return func(url string, lease time.Duration) (func() (float64, error), error) {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(self, "--role", "coordinator", "--server", url, "--log-level", logLevel, "--leader-lease", lease.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return func() (float64, error) {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			var heap float64 = -1
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "HEAP "); ok {
					var h struct {
						PeakMB float64 `json:"peak_heap_inuse_mb"`
					}
					if err := json.Unmarshal([]byte(v), &h); err == nil {
						heap = h.PeakMB
					}
				}
			}
			if err := cmd.Wait(); err != nil {
				return heap, fmt.Errorf("coordinator process: %w", err)
			}
			if heap < 0 {
				return heap, errors.New("coordinator process reported no heap figure")
			}
			return heap, nil
		}, nil
	}
}

// runCoordinator runs the coordinator, sampling the heap, and prints the peak on exit.
func runCoordinator(ctx context.Context, url string, lease time.Duration, log zerolog.Logger) int {
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	settings := contract.DefaultSettings()
	settings.LeaderLease = lease
	c, err := coordinator.New(coordinator.Config{Conn: nc, Settings: settings, Log: log, Instance: "bench"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var peak uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err = c.Run(ctx)
	<-done
	fmt.Printf("HEAP {\"peak_heap_inuse_mb\": %.1f}\n", float64(peak)/(1<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
