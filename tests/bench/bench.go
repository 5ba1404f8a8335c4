// Package bench measures a whole rollout over simulated in-process agents
// (fixed apply latency, no disk) against the real configurator, coordinator
// and agent code on an embedded nats-server, and compares the wall time with
// the ideal ceil(nodes/maxParallel)·apply.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
)

// Options says what to measure.
type Options struct {
	Nodes        int
	MaxParallel  int
	ApplyLatency time.Duration
	// StoreDir holds JetStream's files; "" uses a fresh temporary directory.
	StoreDir string
	// AgentsPerConn is how many simulated agents share one NATS connection.
	AgentsPerConn int
	// StartCoordinator starts a coordinator in a process of its own: the
	// measured one (its peak heap is reported) and the failover scenario's
	// successor (the pause phase pauses its process). nil runs them in this
	// process (the heap then cannot be told apart and is reported as -1,
	// and Pauses must be 0).
	StartCoordinator func(CoordinatorSpec) (Process, error)
	Log              zerolog.Logger
	// Measuring, if set, is called with true just before the measured
	// rollout's apply and with false once it ended (to profile only it).
	Measuring func(bool)
	// FailWave > 0 adds the failure scenario: a second rollout in waves of
	// 10, 20, 40 … nodes in which the first node of that wave fails.
	FailWave int
	// LeaderLease is the coordinators' lease (0: contract.DefaultSettings').
	LeaderLease time.Duration
	// NodeLease is the agents' presence lease, given to every component
	// (0: contract.DefaultSettings').
	NodeLease time.Duration
	// Failover adds the failover scenario: a third rollout under two
	// coordinators whose leader is killed when half the nodes are written,
	// and a fourth whose leader is stopped cleanly.
	Failover bool
	// Pauses > 0 (with Failover and StartCoordinator) ends the failover
	// scenario by pausing the leader's process for a second that many
	// times while a standby runs.
	Pauses int
	// NoReaper leaves the reaper out (it runs by default, as in a
	// deployment: its passes are part of what a fleet costs).
	NoReaper bool
	// CPUProfile, if set, receives the CPU profile of this process during
	// the measured rollout (the one Components are split from).
	CPUProfile io.Writer
}

// Result is one measured run; its JSON is the BENCH line.
type Result struct {
	Nodes              int     `json:"nodes"`
	MaxParallel        int     `json:"max_parallel"`
	ApplyMS            int64   `json:"apply_ms"`
	WallMS             float64 `json:"wall_ms"`
	IdealMS            int64   `json:"ideal_ms"`
	OverheadRatio      float64 `json:"overhead_ratio,omitempty"` // absent when ideal_ms is 0 (apply_ms 0)
	KVWritesPerNode    float64 `json:"kv_writes_per_node"`
	HeartbeatWrites    uint64  `json:"heartbeat_writes"`
	JetStreamConsumers int     `json:"jetstream_consumers"`
	CoordinatorHeapMB  float64 `json:"coordinator_heap_mb"`
	CoordinatorLiveMB  float64 `json:"coordinator_live_heap_mb"`
	// BenchPeakRSSMB is the bench process's peak resident memory (VmHWM:
	// the server, the agents, the configurator and the reaper), absent
	// where /proc cannot be read.
	BenchPeakRSSMB *float64 `json:"bench_peak_rss_mb,omitempty"`
	// As the measured rollout ends, in the bench process: heap and
	// goroutine stacks in use, and goroutines (what a simulated agent costs).
	BenchHeapMB    float64 `json:"bench_heap_inuse_mb"`
	BenchStackMB   float64 `json:"bench_stack_inuse_mb"`
	BenchGoroutine int     `json:"bench_goroutines"`
	StartMS        float64 `json:"start_ms"` // from the apply request to the rollout's start
	// NodeStart: from the apply request to a node's desired config write
	// landing (the entry's stored time), per node.
	NodeStartP50 float64 `json:"node_start_ms_p50"`
	NodeStartP99 float64 `json:"node_start_ms_p99"`
	// Agent: the time an agent adds to the apply, per node: from the
	// desired config's write to the Provisioned report, less apply_ms.
	AgentP50 float64 `json:"agent_overhead_ms_p50"`
	AgentP99 float64 `json:"agent_overhead_ms_p99"`
	// Handoff: from a node's Provisioned report to the desired config
	// write of the node that took its slot.
	HandoffP50 float64 `json:"handoff_ms_p50"`
	HandoffP99 float64 `json:"handoff_ms_p99"`
	// Presence: the node lease the run used; the nodes whose presence was
	// deleted or expired from the agents' start to the end of the measured
	// rollout (0 on a healthy run); heartbeat writes per second per 1,000
	// nodes during that rollout.
	NodeLeaseMS             int64   `json:"node_lease_ms"`
	PresenceLost            int     `json:"presence_lost"`
	PresenceWritesPerSPer1k float64 `json:"presence_writes_per_s_per_1k"`
	// Processor time used during the measured rollout: by the bench's own
	// process (nats-server, the agents and the configurator, and the
	// coordinator when it runs in-process) and by the measured
	// coordinator's process (absent when in-process); their sum per node;
	// and cores_busy, that sum over the wall time — near the machine's
	// core count, the run was bound by the processor, not by waiting.
	CPUMSBench       float64  `json:"cpu_ms_bench_process"`
	CPUMSCoordinator *float64 `json:"cpu_ms_coordinator,omitempty"`
	CPUUSPerNode     float64  `json:"cpu_us_per_node"`
	CoresBusy        float64  `json:"cores_busy"`
	// The machine's 1-minute load average when the run started and ended
	// (absent where /proc/loadavg cannot be read).
	LoadAvgStart *float64 `json:"load_avg_start,omitempty"`
	LoadAvgEnd   *float64 `json:"load_avg_end,omitempty"`
	Rollout      string   `json:"rollout"`
	Phase        string   `json:"phase"`
	// The failure scenario (with FailWave): revert_ms runs from the failure
	// being recorded to the last touched node reporting its backup in force.
	FailedNode string  `json:"failed_node,omitempty"`
	Touched    int     `json:"touched_nodes,omitempty"`
	RevertMS   float64 `json:"revert_ms,omitempty"`
	FailPhase  string  `json:"fail_phase,omitempty"`
	// The failover scenario (with Failover), from the leader's kill: to the
	// new leader's first desired config write; the lease's remaining life at
	// the kill; to the server expiring it; to the standby acquiring it.
	TakeoverMS           float64 `json:"takeover_ms,omitempty"`
	TakeoverLeaseLeftMS  float64 `json:"takeover_lease_left_ms,omitempty"`
	TakeoverExpiredMS    float64 `json:"takeover_expired_ms,omitempty"`
	TakeoverAcquiredMS   float64 `json:"takeover_acquired_ms,omitempty"`
	TakeoverLeaseMS      int64   `json:"takeover_lease_ms,omitempty"`
	TakeoverLeaseRatio   float64 `json:"takeover_lease_ratio,omitempty"` // takeover_ms / takeover_lease_ms
	FailoverNewTermNodes int     `json:"failover_new_term_nodes,omitempty"`
	// From a clean stop of the leader (it releases the lease): to the
	// successor's first desired config write; to the lease no longer
	// naming the leader; to the successor acquiring it.
	CleanTakeoverMS         float64 `json:"clean_takeover_ms,omitempty"`
	CleanTakeoverReleasedMS float64 `json:"clean_takeover_released_ms,omitempty"`
	CleanTakeoverAcquiredMS float64 `json:"clean_takeover_acquired_ms,omitempty"`
	// With Pauses: how often the lease changed holder or term while the
	// leader's process was paused that many times (absent without pauses).
	FalseTakeovers      *int `json:"false_takeovers,omitempty"`
	FalseTakeoverPauses int  `json:"false_takeover_pauses,omitempty"`
	// The coordinator's verify pass: listing the nodeconfigs bucket's keys
	// (every node's desired config, and its backup after the failure
	// scenario), which the leader does every --verify-interval.
	VerifyListMS  float64 `json:"verify_list_ms"`
	VerifyKeys    int     `json:"verify_keys"`
	FailoverPhase string  `json:"failover_phase,omitempty"`
	// Components splits the measured rollout by component (server,
	// configurator, reaper, agents, coordinator, bench, runtime): messages
	// and bytes per node as the server counted them on each component's
	// connections, and processor time per node from a CPU profile of this
	// process by goroutine label (the coordinator's own process by /proc).
	Components map[string]Component `json:"components,omitempty"`
}

// Run performs one measured rollout.
func Run(ctx context.Context, o Options) (res Result, err error) {
	res = Result{Nodes: o.Nodes, MaxParallel: o.MaxParallel, ApplyMS: o.ApplyLatency.Milliseconds(), CoordinatorHeapMB: -1, CoordinatorLiveMB: -1,
		LoadAvgStart: loadAvg()}
	defer func() { res.LoadAvgEnd, res.BenchPeakRSSMB = loadAvg(), peakRSSMB() }()
	if o.AgentsPerConn <= 0 {
		o.AgentsPerConn = 250
	}
	if o.Pauses > 0 && (!o.Failover || o.StartCoordinator == nil) {
		return res, errors.New("pauses need the failover scenario and a coordinator in a process of its own (StartCoordinator)")
	}
	dir := o.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	var srv *server.Server
	as(compServer, func() { srv, err = embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir}) })
	if err != nil {
		return res, err
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	settings := contract.DefaultSettings()
	if o.LeaderLease > 0 {
		settings.LeaderLease = o.LeaderLease
	}
	if o.NodeLease > 0 {
		settings.NodeLease = o.NodeLease
	}
	if err := settings.Validate(); err != nil {
		return res, err
	}
	res.NodeLeaseMS = settings.NodeLease.Milliseconds()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// A connection is named for its component ("agents-3"): the server's
	// counters are split by that name, its goroutines by the label.
	connect := func(name string) (nc *nats.Conn, err error) {
		as(componentOfConn(name), func() { nc, err = nats.Connect(url, nats.MaxReconnects(-1), nats.Name(name)) })
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}
	run := func(component, name string, f func(context.Context) error) {
		wg.Add(1)
		as(component, func() {
			go func() {
				defer wg.Done()
				if err := f(ctx); err != nil && ctx.Err() == nil {
					o.Log.Error().Err(err).Str("service", name).Msg("stopped")
				}
			}()
		})
	}

	nc, err := connect(compBench + "-driver")
	if err != nil {
		return res, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	if err := buckets.Ensure(ctx, js, settings); err != nil {
		return res, err
	}
	cfgrConn, err := connect(compConfigurator)
	if err != nil {
		return res, err
	}
	cfgr, err := configurator.New(configurator.Config{Conn: cfgrConn, Settings: settings, Log: o.Log})
	if err != nil {
		return res, err
	}
	run(compConfigurator, compConfigurator, cfgr.Run)
	if !o.NoReaper {
		rc, err := connect(compReaper)
		if err != nil {
			return res, err
		}
		rp, err := reaper.New(reaper.Config{Conn: rc, Settings: settings, Log: o.Log, Instance: "bench-reaper"})
		if err != nil {
			return res, err
		}
		run(compReaper, compReaper, rp.Run)
	}

	var measured Process
	if o.StartCoordinator != nil {
		measured, err = o.StartCoordinator(CoordinatorSpec{URL: url, Instance: "bench", LeaderLease: settings.LeaderLease, NodeLease: settings.NodeLease})
	} else {
		as(compCoordinator, func() { measured, err = startCoordinator(ctx, url, settings, "bench", o.Log) })
	}
	if err != nil {
		return res, err
	}
	defer func() { _, _ = measured.Stop() }()
	// Watching from before the agents start: every lost presence is seen.
	presence, err := watchPresence(ctx, url)
	if err != nil {
		return res, err
	}
	defer presence.stop()

	failing := ""
	if o.FailWave > 0 {
		failing = failNode(o)
	}
	var (
		agentConn    *nats.Conn
		agentJS      jetstream.JetStream
		agentBuckets *buckets.Set
	)
	for i := range o.Nodes {
		if i%o.AgentsPerConn == 0 {
			// Agents on one connection share its JetStream context and
			// buckets, as they would share nothing on real nodes.
			if agentConn, err = connect(fmt.Sprintf("%s-%d", compAgents, i/o.AgentsPerConn)); err != nil {
				return res, err
			}
			if agentJS, err = jetstream.New(agentConn, jetstream.WithPublishAsyncMaxPending(64<<10)); err != nil {
				return res, err
			}
			if agentBuckets, err = buckets.BindAll(ctx, agentJS); err != nil {
				return res, err
			}
			// As buckets.Prepare finds it: the nodes bucket's TTL.
			agentBuckets.NodeLease = settings.NodeLease
		}
		name := nodeName(i)
		a, err := agent.New(agent.Config{
			Conn: agentConn, Settings: settings, Log: o.Log, Node: name, Version: "bench",
			Labels:    map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3), "rack": fmt.Sprintf("rack-%d", 1+i/3%2)},
			Applier:   agent.ApplierFunc(simulatedApply(name, failing, o.ApplyLatency)),
			JetStream: agentJS, Buckets: agentBuckets,
		})
		if err != nil {
			return res, err
		}
		run(compAgents, name, a.Run)
	}
	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		return res, err
	}
	// The stream's subject count first (one small request), the keys
	// once it says every node is there: listing 100,000 keys every few
	// milliseconds would slow the registration it waits for.
	nodesStream, err := js.Stream(ctx, contract.StreamOfBucket(contract.BucketNodes))
	if err != nil {
		return res, err
	}
	if err := waitFor(ctx, registerTimeout(o.Nodes), func() (bool, error) {
		if info, err := nodesStream.Info(ctx); err != nil || info.State.NumSubjects < uint64(o.Nodes) {
			return false, err
		}
		keys, err := store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).Keys(ctx)
		return len(keys) >= o.Nodes, err
	}); err != nil {
		return res, fmt.Errorf("waiting for %d agents to register: %w", o.Nodes, err)
	}
	// Wait for the coordinator to lead before starting the clock.
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		_, err := b.Leases.Get(ctx, contract.LeaseCoordinator)
		return err == nil, nil
	}); err != nil {
		return res, fmt.Errorf("waiting for a coordinator to lead: %w", err)
	}

	if err := apiclient.WaitReady(ctx, nc); err != nil {
		return res, err
	}
	before, beats0, err := kvWrites(ctx, js)
	if err != nil {
		return res, err
	}
	if o.Measuring != nil {
		o.Measuring(true)
	}
	conns0, err := countConns(srv)
	if err != nil {
		return res, err
	}
	prof := &componentProfile{keep: o.CPUProfile}
	if err := prof.start(); err != nil {
		return res, err
	}
	defer func() { _, _ = prof.stop() }()
	benchCPU0, coordCPU0 := selfCPU(), cpuOf(measured)
	start := time.Now()
	resp, err := apiclient.Apply(ctx, nc, &sluicev1.ApplyRequest{
		Intents: Intents(), Strategy: &sluicev1.Strategy{MaxParallel: strconv.Itoa(o.MaxParallel)}, Source: "bench",
	})
	if err != nil {
		return res, fmt.Errorf("apply: %w", err)
	}
	rollouts := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	refs := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	var final *sluicev1.Rollout
	// Poll with direct gets: a watcher would add a JetStream consumer to the count.
	err = waitFor(ctx, 30*time.Minute, func() (bool, error) {
		if res.Rollout == "" {
			for _, key := range []string{contract.KeyActive, contract.KeyLastApplied} {
				if ref, err := refs.Get(ctx, key); err == nil && ref.Value.GetGeneration() == resp.GetGeneration() {
					res.Rollout = ref.Value.GetRollout()
				}
			}
			if n, err := consumers(ctx, js); err == nil {
				res.JetStreamConsumers = max(res.JetStreamConsumers, n)
			}
			return false, nil
		}
		r, err := rollouts.Get(ctx, res.Rollout)
		if err != nil {
			return false, nil
		}
		final = r.Value
		return r.Value.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, nil
	})
	wall := time.Since(start)
	cpu := selfCPU() - benchCPU0
	var coordCPU *time.Duration
	if coordCPU0 != nil {
		if c1 := cpuOf(measured); c1 != nil {
			coordCPU = new(*c1 - *coordCPU0)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.BenchHeapMB, res.BenchStackMB, res.BenchGoroutine = round2(float64(ms.HeapInuse)/(1<<20)), round2(float64(ms.StackInuse)/(1<<20)), runtime.NumGoroutine()
	byLabel, perr := prof.stop()
	conns1, cerr := countConns(srv)
	if o.Measuring != nil {
		o.Measuring(false)
	}
	res.CPUMSBench = millis(cpu)
	if coordCPU != nil {
		res.CPUMSCoordinator = new(millis(*coordCPU))
		cpu += *coordCPU
	}
	res.CPUUSPerNode, res.CoresBusy = cpuFigures(cpu, wall, o.Nodes)
	if err != nil {
		return res, fmt.Errorf("waiting for the rollout to end: %w", err)
	}
	if err := errors.Join(perr, cerr); err != nil {
		return res, err
	}
	res.Components = components(conns0, conns1, byLabel, coordCPU, o.Nodes)
	if n, err := consumers(ctx, js); err == nil {
		res.JetStreamConsumers = max(res.JetStreamConsumers, n)
	}
	after, beats1, err := kvWrites(ctx, js)
	if err != nil {
		return res, err
	}
	res.Phase = final.GetPhase().String()
	res.StartMS = float64(final.GetStartedAt().AsTime().Sub(start).Microseconds()) / 1000
	res.WallMS = float64(wall.Microseconds()) / 1000
	res.IdealMS = idealMS(o)
	res.OverheadRatio = overheadRatio(res.WallMS, res.IdealMS)
	res.KVWritesPerNode = math.Round(float64(after-before)/float64(o.Nodes)*100) / 100
	res.HeartbeatWrites = beats1 - beats0
	res.PresenceWritesPerSPer1k = perSecondPer1k(res.HeartbeatWrites, wall, o.Nodes)
	// beats1 is the nodes stream's last sequence at the rollout's end.
	if res.PresenceLost, err = presence.lostUntil(ctx, beats1); err != nil {
		return res, err
	}
	presence.stop()
	if err := timeline(ctx, b, o, start, &res); err != nil {
		return res, err
	}
	if final.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		return res, fmt.Errorf("rollout %s ended %s: %s", res.Rollout, final.GetPhase(), final.GetReason())
	}
	if o.FailWave > 0 {
		if err := failureScenario(ctx, nc, b, o, &res); err != nil {
			return res, fmt.Errorf("failure scenario: %w", err)
		}
	}
	// The leader's verify pass (--verify-interval, once a minute by
	// default) lists the nodeconfigs keys off its loop: the same listing,
	// timed here once every node has its desired config (and, after the
	// failure scenario, its backup).
	if res.VerifyListMS, res.VerifyKeys, err = verifyListing(ctx, b); err != nil {
		return res, fmt.Errorf("verify listing: %w", err)
	}
	// The failover scenario runs its own coordinators: the measured one
	// stops first (releasing its lease) and reports its heap.
	if res.CoordinatorHeapMB, err = measured.Stop(); err != nil {
		return res, err
	}
	if c, ok := measured.(*child); ok {
		res.CoordinatorLiveMB = c.live
	}
	if o.Failover {
		if err := failoverScenario(ctx, url, nc, b, settings, o, &res); err != nil {
			return res, fmt.Errorf("failover scenario: %w", err)
		}
	}
	return res, nil
}

// registerTimeout bounds the wait for the agents to register: 5 minutes,
// and 5 more per 100,000 nodes.
func registerTimeout(nodes int) time.Duration {
	return 5*time.Minute + time.Duration(nodes/100_000)*5*time.Minute
}

// verifyListing times one listing of the nodeconfigs keys, as the
// coordinator's verify pass makes it (store.Store.Keys).
func verifyListing(ctx context.Context, b *buckets.Set) (ms float64, keys int, err error) {
	configs := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	start := time.Now()
	ks, err := configs.Keys(ctx)
	return float64(time.Since(start).Microseconds()) / 1000, len(ks), err
}

// Waves of the failure scenario: 10 nodes, then 20, 40, ...
const (
	failFirstWave  = 10
	failWaveGrowth = 2
)

// failNode is the node that fails in the failure scenario: the first node
// of wave o.FailWave, nodes being started in name order.
func failNode(o Options) string {
	before, size := 0, failFirstWave
	for w := 1; w < o.FailWave; w++ {
		before += size
		size *= failWaveGrowth
	}
	return nodeName(min(before, o.Nodes-1))
}

func nodeName(i int) string { return fmt.Sprintf("node-%05d", i+1) }

// failureScenario rolls out a second revision in waves; failNode fails to
// apply it. It measures revert_ms: from the failure being recorded until
// every touched node reports its backup in force.
func failureScenario(ctx context.Context, nc *nats.Conn, b *buckets.Set, o Options, res *Result) error {
	in := append(Intents(), &sluicev1.Intent{Name: "bench-change", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 200}}})
	badRevision.Store(render.RevisionID(in))
	resp, err := apiclient.Apply(ctx, nc, &sluicev1.ApplyRequest{Intents: in, Source: "bench", Strategy: &sluicev1.Strategy{
		MaxParallel: strconv.Itoa(o.MaxParallel), FirstWave: failFirstWave, WaveGrowth: failWaveGrowth}})
	if err != nil {
		return err
	}
	id := contract.RolloutID(resp.GetGeneration(), resp.GetRevision())
	rollouts := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var final *sluicev1.Rollout
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		r, err := rollouts.Get(ctx, id)
		if err != nil {
			return false, nil
		}
		final = r.Value
		p := r.Value.GetPhase()
		return p != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING && p != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING, nil
	}); err != nil {
		return err
	}
	res.FailPhase, res.FailedNode = final.GetPhase().String(), failNode(o)
	if final.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK || len(final.GetFailures()) == 0 {
		return fmt.Errorf("rollout %s ended %s: %s", id, final.GetPhase(), final.GetReason())
	}
	rec, err := store.New(b.Fingerprints, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }).
		Get(ctx, final.GetFailures()[0].GetFingerprint())
	if err != nil {
		return err
	}
	failedAt := rec.Value.GetTime().AsTime()
	desired, err := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, "*.desired")
	if err != nil {
		return err
	}
	status := store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	var last time.Time
	for _, d := range desired {
		if !d.Value.GetRevert() || d.Value.GetRollout() != id {
			continue
		}
		res.Touched++
		st, err := status.Get(ctx, d.Value.GetNode())
		if err != nil {
			return err
		}
		if st.Value.GetFingerprint() != d.Value.GetFingerprint() || st.Value.GetPhase() != sluicev1.NodePhase_NODE_PHASE_PROVISIONED {
			return fmt.Errorf("%s did not report its backup: %v", d.Value.GetNode(), st.Value)
		}
		if t := st.Value.GetLastUpdate().AsTime(); t.After(last) {
			last = t
		}
	}
	res.RevertMS = float64(last.Sub(failedAt).Microseconds()) / 1000
	return nil
}

// badRevision is the revision the failure scenario's node cannot apply.
var badRevision atomic.Value

func simulatedApply(node, fail string, d time.Duration) func(context.Context, *sluicev1.DesiredConfig) error {
	return func(ctx context.Context, c *sluicev1.DesiredConfig) error {
		if node == fail && !c.GetRevert() && c.GetRevision() == badRevision.Load() {
			return errors.New("simulated failure")
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// kvWrites sums the messages ever stored in every sluice bucket except the
// presence heartbeats, which are returned apart.
func kvWrites(ctx context.Context, js jetstream.JetStream) (writes, heartbeats uint64, err error) {
	for _, cfg := range contract.DefaultSettings().BucketConfigs() {
		s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
		if err != nil {
			return 0, 0, err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		if cfg.Bucket == contract.BucketNodes {
			heartbeats = info.State.LastSeq
			continue
		}
		writes += info.State.LastSeq
	}
	return writes, heartbeats, nil
}

// consumers counts the JetStream consumers on every stream but the bench's
// own (the presence watch's, see ownConsumer).
func consumers(ctx context.Context, js jetstream.JetStream) (int, error) {
	n := 0
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		n += info.State.Consumers
	}
	if err := l.Err(); err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, contract.StreamOfBucket(contract.BucketNodes))
	if err != nil {
		return 0, err
	}
	cl := s.ListConsumers(ctx)
	for ci := range cl.Info() {
		if ownConsumer(ci) {
			n--
		}
	}
	return n, cl.Err()
}

// perSecondPer1k is writes per second per 1,000 nodes over d, to 2 decimals.
func perSecondPer1k(writes uint64, d time.Duration, nodes int) float64 {
	if d <= 0 || nodes <= 0 {
		return 0
	}
	return round2(float64(writes) / d.Seconds() / (float64(nodes) / 1000))
}

func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Intents is the benchmark's configuration: a network per zone and a table on every node.
func Intents() []*sluicev1.Intent {
	var out []*sluicev1.Intent
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		out = append(out, &sluicev1.Intent{Name: "net-" + zone, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: uint32(100 + i), Vni: uint32(10100 + i), Mtu: 9000, Vrf: "tenant",
			AnycastGateways: []string{fmt.Sprintf("10.%d.0.1/24", i)},
			NodeSelector:    &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": zone}},
		}}})
	}
	out = append(out, &sluicev1.Intent{Name: "tenant", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 100}}})
	return out
}

// timeline reads the desired configs' write times and the agents' report
// times back from the buckets to split the overhead between agents and coordinator.
func timeline(ctx context.Context, b *buckets.Set, o Options, start time.Time, res *Result) error {
	desired, err := store.New(b.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} }).List(ctx, "*.desired")
	if err != nil {
		return err
	}
	status, err := store.New(b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }).List(ctx, ">")
	if err != nil {
		return err
	}
	written := map[string]time.Time{}
	var writes, dones []time.Time
	var nodeStart []float64
	for _, d := range desired {
		t := d.Value.GetWrittenAt().AsTime()
		written[d.Value.GetNode()] = t
		writes = append(writes, t)
		nodeStart = append(nodeStart, ms(d.Created.Sub(start)))
	}
	var agent []float64
	for _, s := range status {
		done := s.Value.GetLastUpdate().AsTime()
		dones = append(dones, done)
		if w, ok := written[s.Value.GetNode()]; ok {
			agent = append(agent, float64(done.Sub(w)-o.ApplyLatency)/float64(time.Millisecond))
		}
	}
	slices.SortFunc(writes, time.Time.Compare)
	slices.SortFunc(dones, time.Time.Compare)
	var handoff []float64
	for k := o.MaxParallel; k < len(writes) && k-o.MaxParallel < len(dones); k++ {
		handoff = append(handoff, float64(writes[k].Sub(dones[k-o.MaxParallel]))/float64(time.Millisecond))
	}
	res.NodeStartP50, res.NodeStartP99 = percentile(nodeStart, 50), percentile(nodeStart, 99)
	res.AgentP50, res.AgentP99 = percentile(agent, 50), percentile(agent, 99)
	res.HandoffP50, res.HandoffP99 = percentile(handoff, 50), percentile(handoff, 99)
	return nil
}

// overheadRatio is wall / ideal, rounded to 3 decimals; 0 (left out of
// the BENCH line) when the ideal is 0: with no apply latency there is no
// ideal to compare with, and the division would be +Inf, which JSON cannot
// carry.
func overheadRatio(wallMS float64, idealMS int64) float64 {
	if idealMS <= 0 {
		return 0
	}
	return math.Round(wallMS/float64(idealMS)*1000) / 1000
}

// idealMS is the rollout's ideal wall time: ceil(nodes/maxParallel)·apply.
func idealMS(o Options) int64 {
	return int64(math.Ceil(float64(o.Nodes)/float64(o.MaxParallel))) * o.ApplyLatency.Milliseconds()
}

// cpuFigures is processor time cpu used over wall as microseconds per node
// and cores busy, to 2 decimals.
func cpuFigures(cpu, wall time.Duration, nodes int) (usPerNode, coresBusy float64) {
	return round2(float64(cpu.Nanoseconds()) / 1e3 / float64(max(nodes, 1))), round2(cpu.Seconds() / wall.Seconds())
}

// Line is the result as the bench prints it: BENCH {json}. A figure JSON
// cannot carry (NaN, ±Inf) is an error, never an empty line.
func (r Result) Line() (string, error) { return benchLine(r) }

// benchLine is v as the bench prints it: BENCH {json}.
func benchLine(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode the BENCH line: %w", err)
	}
	return "BENCH " + string(b), nil
}
