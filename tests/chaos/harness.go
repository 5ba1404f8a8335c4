package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// Timing of every seed: short, so that a seed takes a few seconds.
const (
	leaderLease  = time.Second // the server's minimum TTL
	tickInterval = 50 * time.Millisecond
	saveInterval = 20 * time.Millisecond
	// verifyInterval: the leader compares its desired configs with the
	// bucket's keys this often (a minute in production), so seeds exercise it.
	verifyInterval = time.Second
	resyncEvery    = 2 * time.Second
	// reaperEvery: departed nodes are reaped at their grace by the
	// reaper's own pass then; the interval drives its collections of
	// revisions and intents. Every pass lists every bucket: at 200 ms it
	// was most of a long seed's processor time (seed 65, two virtual
	// minutes for a closing window: 12.5 s, 5.2 s at 1 s).
	reaperEvery = time.Second
	// revisionRetention: the reaper keeps only the newest revision besides
	// the referenced ones, so a seed's few revisions are collected and what
	// it keeps is what references keep (I5; the default 50 kept them all).
	revisionRetention = 1
	coordinatorA      = "coord-a"
	coordinatorB      = "coord-b"
	configuratorC     = "configurator"
	reaperC           = "reaper"
)

// Margins of the harness's own waits. Each is a poll that returns as soon
// as its condition holds, so a passing seed never waits one out; each is
// long against the seconds a seed's work takes, for a loaded 2-core
// machine. They are not the product's deadlines: the invariants judge
// those (in leader time, I2).
const (
	registerWithin = 60 * time.Second // every agent registered, before any fault
	acceptWithin   = 60 * time.Second // the configurator accepted a change
	endWithin      = 60 * time.Second // a rollout the driver waits for ended
	settleWithin   = 40 * time.Second // the system at rest after the faults
)

// system is every sluice service and a fleet of real agents running in
// this process against one embedded nats-server; each can be stopped and
// started on its own, and the server restarted on the same store.
type system struct {
	t        *testing.T
	sc       Scenario
	settings contract.Settings
	natsDir  string
	listen   string // "" on virtual time (in-process connections)
	virtual  bool   // on virtual time: in a synctest bubble, in-process connections
	// inProcess is the server on virtual time, across restarts.
	inProcess *natstest.InProcess
	agentDir  string
	log       *schedule
	logger    zerolog.Logger

	envMu   sync.Mutex
	env     *natstest.Env
	cluster *natstest.Cluster // R3 seeds
	proxy   *proxy            // single-server seeds: every component connects through it

	pausers map[string]*pauser // coordinator instance → its pause switch

	mu     sync.Mutex
	stops  map[string]func()               // component or node → stop it and wait
	coords map[string]*coordinator.Service // running coordinator instances

	panics atomic.Int32

	findingsMu sync.Mutex
	findings   []Violation // what faults found while they ran (the pause check)
	harness    []error     // the harness's own failures while faults ran (harnessFailed)

	nodes map[string]*nodeSim // fixed at start
	// tables maps a routing-table id to its change, for the appliers.
	tables map[uint32]int

	spoiled spoils // the garbage values written (garbage-value)
	// gate holds revert applies (Scenario.RevertGate) until the
	// leave-until-revert fault's node is back; closed by that fault.
	gate     chan struct{}
	gateOnce sync.Once
	reg      *registry // the scenario's registry; nil without one

	frozen freezes      // the freezes the harness wrote (freeze.go)
	prom   *promStub    // the gates' Prometheus (gates.go); nil without gates
	gateMu sync.Mutex   // guards fired
	fired  map[int]bool // changes whose fires-mid alert fires
	// closesAt is when the closing window of Extras.Closing closes (the
	// driver's, set before that change is applied; windows.go).
	closesAt time.Time
}

// nodeSim is what the harness knows of one node: its applier's record.
type nodeSim struct {
	name     string
	index    int
	mu       sync.Mutex
	applies  []Apply
	applying atomic.Uint32 // routing table being applied (0 = none, or an empty config)
}

func (n *nodeSim) record(a Apply) {
	n.mu.Lock()
	n.applies = append(n.applies, a)
	n.mu.Unlock()
}

func (n *nodeSim) history() []Apply {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.applies)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newSystem(t *testing.T, sc Scenario, log *schedule) *system {
	settings := contract.DefaultSettings()
	settings.LeaderLease = leaderLease
	settings.NodeLease = sc.NodeLease
	settings.InstanceLease = sc.NodeLease // a killed instance drops out of a pause's "live" as quickly as a node
	s := &system{t: t, sc: sc, settings: settings, natsDir: t.TempDir(), agentDir: t.TempDir(), virtual: virtualTime(),
		log: log, logger: zerolog.Nop(), stops: map[string]func(){}, coords: map[string]*coordinator.Service{}, nodes: map[string]*nodeSim{}, tables: map[uint32]int{},
		gate: make(chan struct{})}
	if path := os.Getenv("CHAOS_LOG_DIR"); path != "" {
		_ = os.MkdirAll(path, 0o755) // a missing directory silently lost seed 49's log once
		f, err := os.Create(filepath.Join(path, fmt.Sprintf("seed-%d.log", sc.Seed)))
		if err == nil {
			t.Cleanup(func() { f.Close() })
			// "t" is the schedule's clock (seconds since the seed began, to the
			// millisecond), so a log line reads against the fault schedule.
			at := zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
				e.Str("t", fmt.Sprintf("%.3fs", time.Since(log.start).Seconds()))
			})
			s.logger = zerolog.New(f).Hook(at).With().Timestamp().Logger()
			log.mirrorTo(&s.logger)
		}
	}
	for i, c := range sc.Changes {
		s.tables[c.TableID] = i
	}
	if sc.Registry != nil {
		s.reg = newRegistry(t, sc.Registry, s.virtual)
	}
	s.fired = map[int]bool{}
	if len(sc.Extras.Gates) > 0 {
		s.prom = newPromStub(t, s)
	}
	for i := range sc.Nodes {
		name := NodeName(i)
		s.nodes[name] = &nodeSim{name: name, index: i}
	}
	switch {
	case sc.Cluster:
		s.cluster = natstest.StartCluster(t, 3, settings)
		s.env = s.cluster.Env
		s.settings = s.cluster.Settings // R3
	case s.virtual:
		s.inProcess = &natstest.InProcess{}
		s.env = natstest.StartInProcess(t, s.natsDir, settings, s.inProcess)
		s.proxy = newInProcessProxy(s.inProcess)
		t.Cleanup(s.proxy.close)
	default:
		s.listen = freeAddr(t)
		s.env = natstest.StartAt(t, s.natsDir, s.listen, settings)
		s.proxy = newProxy(s.listen)
		t.Cleanup(s.proxy.close)
	}
	s.pausers = map[string]*pauser{coordinatorA: newPauser(), coordinatorB: newPauser()}
	t.Cleanup(s.stopAll)
	return s
}

// Env is the current server's environment (it changes on a NATS restart).
func (s *system) Env() *natstest.Env {
	s.envMu.Lock()
	defer s.envMu.Unlock()
	return s.env
}

// connect opens component's connection, which reconnects forever to the
// (restartable) server; on one server it goes through the proxy.
func (s *system) connect(component string) *nats.Conn {
	url := s.Env().URL
	var inProcess []nats.Option
	if s.virtual {
		inProcess = []nats.Option{nats.InProcessServer(s.proxy.inProcess(component))}
	} else if s.proxy != nil {
		addr, err := s.proxy.addr(component)
		if err != nil {
			s.t.Errorf("proxy for %s: %v", component, err)
		}
		url = "nats://" + addr
	}
	// A process restarted while NATS is down keeps trying, as a supervisor
	// restarting it would (and a failed connect here must not end the seed
	// from a goroutine that cannot fail the test).
	role, node := s.roleOf(component)
	opts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.RetryOnFailedConnect(true)},
		append(s.Env().RoleOptions(s.t, role, node), inProcess...)...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		s.t.Errorf("connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// roleOf is the credentials role (and node) component connects as when
// the server runs in operator mode (SLUICE_TEST_SECURE=1).
func (s *system) roleOf(component string) (role, node string) {
	switch component {
	case configuratorC:
		return creds.RoleConfigurator, ""
	case coordinatorA, coordinatorB:
		return creds.RoleCoordinator, ""
	case reaperC:
		return creds.RoleReaper, ""
	}
	if _, ok := s.nodes[component]; !ok {
		s.t.Errorf("connect: %q is no component of the harness", component)
	}
	return creds.RoleNode, component
}

func (s *system) run(name string, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			// A service that panics would take every seed of the run down
			// with it: report it against this seed instead.
			if r := recover(); r != nil {
				s.log.add("%s PANICKED: %v", name, r)
				s.panics.Add(1)
				s.t.Errorf("PANIC seed=%d in %s: %v\n%s", s.sc.Seed, name, r, debug.Stack())
			}
		}()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			s.log.add("%s stopped by itself: %v", name, err)
		}
	}()
	s.mu.Lock()
	s.stops[name] = func() { cancel(); <-done }
	s.mu.Unlock()
}

// halt stops one component or agent and waits for it; false if it was not running.
func (s *system) halt(name string) bool {
	s.mu.Lock()
	stop := s.stops[name]
	delete(s.stops, name)
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	return stop != nil
}

func (s *system) running(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stops[name] != nil
}

func (s *system) stopAll() {
	s.mu.Lock()
	names := make([]string, 0, len(s.stops))
	for n := range s.stops {
		names = append(names, n)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() { s.halt(n) })
	}
	wg.Wait()
}

func (s *system) start() {
	s.startConfigurator()
	s.startCoordinator(coordinatorA)
	if s.sc.Standby {
		s.startCoordinator(coordinatorB)
	}
	s.startReaper()
	for i := range s.sc.Nodes {
		s.startAgent(NodeName(i))
	}
}

func (s *system) startReaper() {
	rp, err := reaper.New(reaper.Config{Conn: s.connect(reaperC), Settings: s.settings, Log: s.logger.With().Str("svc", reaperC).Logger(),
		Grace: s.sc.NodeLease, Interval: reaperEvery, RevisionRetention: revisionRetention})
	if err != nil {
		s.t.Fatal(err)
	}
	s.run(reaperC, rp.Run)
}

func (s *system) startConfigurator() {
	settle := registrySettle
	c, err := configurator.New(configurator.Config{Conn: s.connect(configuratorC), Settings: s.settings, Log: s.logger.With().Str("svc", configuratorC).Logger(),
		DeleteAfter: &settle})
	if err != nil {
		s.t.Fatal(err)
	}
	s.run(configuratorC, c.Run)
}

func (s *system) startCoordinator(instance string) {
	p := s.pausers[instance]
	p.resume() // a restarted process runs
	c, err := coordinator.New(coordinator.Config{Conn: s.connect(instance), Settings: s.settings, Log: s.logger.With().Str("svc", instance).Logger(),
		Instance: instance, SaveInterval: saveInterval, TickInterval: tickInterval, VerifyInterval: verifyInterval, Now: p.now, BeforeWrite: p.beforeWrite, GateHTTP: s.prom.client()})
	if err != nil {
		s.t.Fatal(err)
	}
	s.run(instance, c.Run)
	s.mu.Lock()
	s.coords[instance] = c
	s.mu.Unlock()
}

// applierTimeout is the agents' ApplierTimeout: a hanging applier gives up a
// second after the coordinator's deadline for it, as a real one would
// after its timeout. That deadline is the longest apply deadline of the
// scenario counted from the agent's acknowledgement, which an agent
// writes once its operation has run ProgressInterval. The second past it
// keeps the applier from giving up at the very instant the coordinator
// times the node out, which would report a failed apply where the
// coordinator recorded a timeout (docs/findings.md, seed 178).
func (s *system) applierTimeout() time.Duration {
	d := time.Second
	for _, c := range s.sc.Changes {
		d = max(d, c.Strategy.GetApplyDeadline().AsDuration())
	}
	return d + agent.DefaultProgressInterval + time.Second
}

func (s *system) startAgent(name string) {
	n := s.nodes[name]
	stateDir := filepath.Join(s.agentDir, name)
	ap := &chaosApplier{sys: s, node: n, file: agent.NewFileApplier(filepath.Join(stateDir, "config.json")),
		path: filepath.Join(stateDir, "config.json")}
	if _, err := os.Stat(filepath.Join(stateDir, agent.ApplyingFile)); err == nil {
		ap.restoring.Store(true) // its first call restores last-good
	}
	nc := s.connect(name)
	a, err := agent.New(agent.Config{Conn: nc, Settings: s.settings, Log: s.logger.With().Str("svc", name).Logger(), Node: name,
		Labels: s.sc.Labels(n.index), StateDir: stateDir, Applier: ap, Version: s.sc.agentVersion(name), Features: s.sc.features(name),
		ApplierTimeout: s.applierTimeout(), ResyncInterval: resyncEvery, CheckPause: 50 * time.Millisecond,
		Checks: []agent.CheckSpec{{Check: connectivity{sys: s, node: name}, Timeout: time.Second}}})
	if err != nil {
		s.t.Fatal(err)
	}
	nlog := s.logger.With().Str("svc", name).Str("component", "harness").Logger()
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) { nlog.Debug().Err(err).Msg("NATS connection lost") })
	nc.SetReconnectHandler(func(c *nats.Conn) {
		nlog.Debug().Str("server", c.ConnectedUrlRedacted()).Msg("NATS connection back")
		a.Reconnected() // as the agent binary does
	})
	s.run(name, a.Run)
}

// onDisk is the fingerprint in node's applier file ("" = none).
func (s *system) onDisk(node string) string {
	b, err := os.ReadFile(filepath.Join(s.agentDir, node, "config.json"))
	if err != nil {
		return ""
	}
	var d sluicev1.DesiredConfig
	if err := store.Unmarshal(b, &d); err != nil {
		return "undecodable: " + err.Error()
	}
	return d.GetFingerprint()
}

// tableOf is the fleet-wide routing table id in a config (0 = none).
func tableOf(d *sluicev1.DesiredConfig) uint32 {
	for _, in := range d.GetConfig().GetIntents() {
		if rt := in.GetRoutingTable(); rt != nil && in.GetName() == fleetWide {
			return rt.GetTableId()
		}
	}
	return 0
}

// behaviour is how node reacts to a config with routing table id table.
func (s *system) behaviour(node string, table uint32) Behaviour {
	i, ok := s.tables[table]
	if !ok {
		return Healthy
	}
	return s.sc.Changes[i].Behaviour[node]
}

// chaosApplier wraps the file applier: it takes the scenario's apply time,
// fails or hangs as the scenario says, and records every call.
type chaosApplier struct {
	sys  *system
	node *nodeSim
	file agent.Applier
	path string
	// restoring: the agent starts over an interrupted apply, so its first
	// call is the restore at start (Apply.RestoreAtStart).
	restoring atomic.Bool
}

// ConfigPath lets checks read the config in force (agent.ConfigFiler).
func (a *chaosApplier) ConfigPath() string { return a.path }

// Validate is the agent's pre-apply validation (agent.Validator): a node
// whose behaviour for d is NodeDown cannot apply anything, as an FRR
// applier whose FRR is not running says.
func (a *chaosApplier) Validate(_ context.Context, d *sluicev1.DesiredConfig) error {
	if a.sys.behaviour(a.node.name, tableOf(d)) == NodeDown {
		return fmt.Errorf("frr instance %s: show version: FRR is not running: %w", a.node.name, agent.ErrNodeFault)
	}
	return nil
}

func (a *chaosApplier) Apply(ctx context.Context, d *sluicev1.DesiredConfig) (err error) {
	table := tableOf(d)
	a.node.applying.Store(table)
	defer a.node.applying.Store(0)
	a.sys.applyStarted(table) // a fires-mid alert gate fires (gates.go)
	restore := a.restoring.Swap(false)
	defer func() {
		rec := Apply{At: time.Now(), Fingerprint: d.GetFingerprint(), Rollout: d.GetRollout(), Revert: d.GetRevert(), RestoreAtStart: restore}
		if err != nil {
			rec.Err = err.Error()
		}
		a.node.record(rec)
	}()
	wait := a.sys.sc.ApplyTime + a.sys.sc.Slow[a.node.name]
	b := a.sys.behaviour(a.node.name, table)
	if b == Hang {
		wait = time.Hour // until the agent's apply timeout cancels ctx
	}
	if d.GetRevert() && a.sys.sc.RevertGate > 0 {
		a.sys.waitGate(ctx)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("apply interrupted: %w", ctx.Err())
	case <-t.C:
	}
	if b == FailApply {
		return errors.New("link tenant-a: no carrier after applying mtu")
	}
	return a.file.Apply(ctx, d)
}

// waitGate holds a revert apply until the leave-until-revert fault's node
// is back, or Scenario.RevertGate passed: the revert runs that long.
func (s *system) waitGate(ctx context.Context) {
	t := time.NewTimer(s.sc.RevertGate)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.gate:
	case <-t.C:
	}
}

// openGate lets every revert apply go on (waitGate); safe twice.
func (s *system) openGate() { s.gateOnce.Do(func() { close(s.gate) }) }

// connectivity is the agents' health check: it fails on the configs the
// scenario makes fail their check, reading the config in force as a real
// check would.
type connectivity struct {
	sys  *system
	node string
}

func (c connectivity) Name() string { return "connectivity" }

func (c connectivity) Run(_ context.Context, env agent.CheckEnv) (string, error) {
	b, err := os.ReadFile(env.ConfigPath)
	if err != nil {
		return "", nil // nothing in force: nothing to check
	}
	var d sluicev1.DesiredConfig
	if err := store.Unmarshal(b, &d); err != nil {
		return "config in force does not decode: " + err.Error(), err
	}
	if c.sys.behaviour(c.node, tableOf(&d)) == FailCheck {
		return "ping 10.0.0.1: 100% packet loss", errors.New("gateway unreachable")
	}
	return "", nil
}

// leader is the coordinator instance holding the lease ("" = none). A
// faulted server may not answer yet: a read that fails is retried (retry),
// and its error is the last one.
func (s *system) leader(ctx context.Context) (string, error) {
	var holder string
	err := retry(ctx, func(ctx context.Context) error {
		e, err := s.Env().Buckets.Leases.Get(ctx, contract.LeaseCoordinator)
		if err != nil {
			return fmt.Errorf("read the leader lease: %w", err)
		}
		var l sluicev1.LeaderLease
		if store.Decode(contract.BucketLeases, contract.LeaseCoordinator, e.Value(), &l) == nil {
			holder = l.GetHolder() // a garbage value (garbage-value) names no one
		}
		return nil
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	return holder, err
}

// restartServer starts cluster server i again and waits until the
// cluster is ready; a failed start or wait is tried again for up to
// readPatience (retry).
func (s *system) restartServer(ctx context.Context, i int) error {
	return retry(ctx, func(context.Context) error {
		if s.cluster.Nodes.Server(i) == nil {
			return s.cluster.Nodes.Restart(i)
		}
		return s.cluster.Nodes.WaitReady(10 * time.Second)
	})
}

// harnessFailed records that the harness failed at its own part while the
// seed ran (runSeed reports it so).
func (s *system) harnessFailed(err error) {
	s.findingsMu.Lock()
	defer s.findingsMu.Unlock()
	s.harness = append(s.harness, err)
}

// schedule is the timestamped log of what the harness did, printed with
// every failure.
type schedule struct {
	start  time.Time
	mu     sync.Mutex
	lines  []string
	mirror *zerolog.Logger // the seed's log (CHAOS_LOG_DIR), nil without
}

func newSchedule() *schedule { return &schedule{start: time.Now()} }

func (l *schedule) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	l.lines = append(l.lines, fmt.Sprintf("%6.2fs ", time.Since(l.start).Seconds())+line)
	if l.mirror != nil {
		l.mirror.Info().Str("component", "schedule").Msg(line)
	}
}

// mirrorTo writes every line added from now on to the seed's log too, so
// the log reads with the faults in place.
func (l *schedule) mirrorTo(logger *zerolog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mirror = logger
}

func (l *schedule) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// pauser plays SIGSTOP on an in-process coordinator: while paused, every
// write it is about to make blocks (coordinator.Config.BeforeWrite) and its
// clock stands still (Config.Now), so when it wakes up it believes its lease
// is still valid and goes on with what it had decided.
type pauser struct {
	mu     sync.Mutex
	paused chan struct{} // nil = running; closed on resume
	frozen time.Time
	held   atomic.Int32 // writes that were held while paused
}

func newPauser() *pauser { return &pauser{} }

func (p *pauser) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil {
		p.paused, p.frozen = make(chan struct{}), time.Now()
	}
}

func (p *pauser) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

func (p *pauser) now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused != nil {
		return p.frozen
	}
	return time.Now()
}

func (p *pauser) beforeWrite(ctx context.Context) {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch == nil {
		return
	}
	p.held.Add(1)
	select {
	case <-ch:
	case <-ctx.Done():
	}
}
