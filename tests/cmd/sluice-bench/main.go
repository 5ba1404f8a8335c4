// Command sluice-bench runs one measured rollout over simulated agents and
// prints the result as its last line: BENCH {json}. The coordinator runs in
// a child process (this binary with --role coordinator) so that its heap is
// measured on its own, and so is the failover scenario's successor, so that
// its process can be paused.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
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
	nodeLease := fs.Duration("node-lease", contract.DefaultSettings().NodeLease, "the agents' presence lease, given to every component (an agent beats every third of it)")
	failover := fs.Bool("failover", true, "after the other scenarios, roll out a change under two coordinators, kill the leader when half the nodes are written and measure the takeover; then stop the new leader cleanly mid-rollout and measure that takeover")
	pauses := fs.Int("pauses", 3, "with --failover, last pause the leader's process (SIGSTOP) for 1s this many times while a standby runs and count the takeovers (0: skip)")
	perConn := fs.Int("agents-per-conn", 250, "simulated agents sharing one NATS connection")
	floor := fs.Bool("floor", false, "instead of a rollout, send the messages a rollout stores and delivers per node over the same server and buckets with none of sluice's services (the transport's floor under overhead_ratio; docs/benchmarks.md)")
	withReaper := fs.Bool("reaper", true, "run the reaper beside the other services, as a deployment does (its passes are part of the fleet's cost)")
	role := fs.String("role", "bench", "bench, or coordinator (internal: a coordinator child process)")
	server := fs.String("server", "", "NATS URL (with --role coordinator)")
	instance := fs.String("instance", "bench", "coordinator instance name (with --role coordinator)")
	logLevel := fs.String("log-level", "error", "log level of the services")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process during the measured rollout to the file (its samples carry a component label: go tool pprof -tagfocus component=agents)")
	coordProfile := fs.String("coordinator-cpuprofile", "", "write a CPU profile of the measured coordinator's process to the file")
	coordHeap := fs.String("coordinator-heapprofile", "", "write the measured coordinator's heap in use to the file as it stops (the whole fleet's state still held)")
	heapProfile := fs.String("heapprofile", "", "with --role coordinator: write the heap in use to the file as the coordinator stops (internal)")
	memProfile := fs.String("memprofile", "", "write this process's allocation profile to the file as the measured rollout ends, and to the file.base as it starts (go tool pprof -sample_index=alloc_space -base file.base file)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := logging.New(os.Stderr, *logLevel, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// The bench's own profile covers the measured rollout only (not the
	// agents' registration nor the scenarios after it); a coordinator
	// child's covers its whole life.
	var measuring func(bool)
	var cpuOut *os.File
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		cpuOut = f
		if *role == "coordinator" {
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			defer pprof.StopCPUProfile()
		} else if *floor {
			measuring = func(on bool) {
				if !on {
					pprof.StopCPUProfile()
				} else if err := pprof.StartCPUProfile(f); err != nil {
					fmt.Fprintln(os.Stderr, "cpuprofile:", err)
				}
			}
		}
	}
	if *memProfile != "" && *role != "coordinator" {
		measuring = allocsDuring(*memProfile, measuring)
	}
	if *role == "coordinator" {
		spec := bench.CoordinatorSpec{URL: *server, Instance: *instance, LeaderLease: *lease, NodeLease: *nodeLease, HeapProfile: *heapProfile}
		if err := bench.RunCoordinator(ctx, spec, log, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if *floor {
		res, err := bench.Floor(ctx, bench.Options{Nodes: *nodes, MaxParallel: *maxPar, ApplyLatency: time.Duration(*applyMS) * time.Millisecond, AgentsPerConn: *perConn, Measuring: measuring})
		line, lerr := res.Line()
		if err = errors.Join(err, lerr); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		fmt.Println(line)
		return 0
	}
	if !*failover {
		*pauses = 0 // the pauses are the failover scenario's last phase
	}
	res, err := bench.Run(ctx, bench.Options{
		Nodes: *nodes, MaxParallel: *maxPar, ApplyLatency: time.Duration(*applyMS) * time.Millisecond, AgentsPerConn: *perConn, FailWave: *failWave,
		LeaderLease: *lease, NodeLease: *nodeLease, Failover: *failover, Pauses: *pauses, StartCoordinator: childCoordinator(*logLevel, *coordProfile, *coordHeap), Log: log, Measuring: measuring,
		NoReaper: !*withReaper, CPUProfile: writerOrNil(cpuOut),
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
	printComponents(os.Stderr, res)
	fmt.Println(line)
	return 0
}

// printComponents writes the measured rollout's split by component as a
// table (the same figures as the BENCH line's "components").
func printComponents(w io.Writer, res bench.Result) {
	if len(res.Components) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%d nodes\tsent/node\treceived/node\tbytes/node\tcpu µs/node\t\n", res.Nodes)
	for _, name := range slices.Sorted(maps.Keys(res.Components)) {
		c := res.Components[name]
		cpu := "-"
		if c.CPUUSPerNode != nil {
			cpu = fmt.Sprintf("%.1f", *c.CPUUSPerNode)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.0f\t%s\t\n", name, c.MsgsSentPerNode, c.MsgsReceivedPerNode, c.BytesPerNode, cpu)
	}
	_ = tw.Flush()
}

// childCoordinator starts this binary as a coordinator process; the first
// one started (the measured coordinator) is profiled into profile and heap,
// if set.
func childCoordinator(logLevel, profile, heap string) func(bench.CoordinatorSpec) (bench.Process, error) {
	return func(s bench.CoordinatorSpec) (bench.Process, error) {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		args := []string{"--role", "coordinator", "--server", s.URL, "--instance", s.Instance,
			"--leader-lease", s.LeaderLease.String(), "--node-lease", s.NodeLease.String(), "--log-level", logLevel}
		if profile != "" {
			args = append(args, "--cpuprofile", profile)
			profile = ""
		}
		if heap != "" {
			args = append(args, "--heapprofile", heap)
			heap = ""
		}
		return bench.StartChild(exec.Command(self, args...))
	}
}

// allocsDuring wraps measuring so that the allocations so far are written
// to path+".base" as the measured rollout starts and to path as it ends:
// go tool pprof -sample_index=alloc_space -base path.base path shows what
// the measured rollout allocated.
func allocsDuring(path string, measuring func(bool)) func(bool) {
	return func(on bool) {
		if measuring != nil {
			measuring(on)
		}
		name := path
		if on {
			name += ".base"
		}
		runtime.GC() // the profile is as of the last GC
		f, err := os.Create(name)
		if err == nil {
			err = errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "memprofile:", err)
		}
	}
}

// writerOrNil is f as an io.Writer, or nil for no file (a nil *os.File in
// an interface is not a nil writer).
func writerOrNil(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}
