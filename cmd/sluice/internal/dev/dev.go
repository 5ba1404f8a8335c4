// Package dev runs the whole of sluice in one process: an embedded
// nats-server with file storage, the configurator, the rollout-coordinator,
// the reaper and a fleet of agents that write their config to files. It is
// what `sluice dev` starts. Entry points: Run for the command, Start for
// tests (it returns a *System with the server's URL).
//
// With NATSCluster 3 it runs three embedded servers clustered over loopback
// routes (DATA/nats-1 … nats-3) with every bucket replicated three times, so
// that stopping one server shows failover. `sluice dev` holds an exclusive
// lock on DATA/LOCK while it runs: a second one on the same directory exits.
//
// A data directory is seeded with the examples only on its first start (no
// intents and no head yet), so a restart resumes where it stopped and never
// undoes what the operator applied.
package dev

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// Defaults of Options.
const (
	DefaultDataDir = ".sluice"
	DefaultListen  = "127.0.0.1:4222"
	DefaultAgents  = 5
)

// Options configure a dev system.
type Options struct {
	// DataDir holds JetStream's files (nats/), the agents' state (agents/<node>/) and sluice.log.
	DataDir string
	// Listen is the NATS host:port; port -1 picks a free one (tests).
	Listen string
	// Agents is how many agents run, named node-01, node-02, …
	Agents int
	// Examples is a directory of intents applied on the first start of
	// DataDir; "" applies none.
	Examples string
	// MaxParallel is the strategy the examples are rolled out with ("" = 1).
	MaxParallel string
	// LogLevel is the level of every service's log (default info).
	LogLevel string
	// Verbose also writes the logs, human-readable, to Stderr; without it
	// only errors go there.
	Verbose bool
	// Stderr receives human-readable logs; nil means os.Stderr.
	Stderr io.Writer
	// Version is published by the agents with their presence.
	Version string
	// Settings are the bucket and lease settings; zero means
	// contract.DefaultSettings() with NATSCluster replicas.
	Settings contract.Settings
	// NATSCluster is the number of embedded NATS servers: 0 or 1 for one
	// server, 3 for a cluster on Listen's port and the two after it.
	NATSCluster int
	// CheckCmds are shell commands every agent runs as health checks after
	// each apply (agent.ExecCheck: SLUICE_NODE, SLUICE_CONFIG); a failing
	// one makes the node restore its last-good config.
	CheckCmds []string
	// Registries are stored in the control bucket before the services
	// start (replacing specs of the same name), so that the configurator
	// syncs them: what --redis and --watch-dir build.
	Registries []*sluicev1.RegistrySpec
	// RegistryDeleteAfter is the configurator's settle period for intents
	// missing from a registry's answers (--registry-delete-after); nil: per
	// registry twice its sync interval, at least 30s.
	RegistryDeleteAfter *time.Duration
	// Secure runs the server in operator mode with the credentials setup
	// in DataDir/creds (made on the first secure start, as `sluice creds
	// init` does): every service, agent and dev's own connections use a
	// user of their role, each agent its own node's (CredsDir, AdminCreds).
	Secure bool
	// Dashboard, when set, starts the dashboard once the services run: it
	// returns the page's URL (the banner prints it) and the function that
	// serves it until its ctx ends. nil runs none (--dashboard-addr off).
	Dashboard func(s *System) (url string, serve func(context.Context) error, err error)
	// HTTPAddr, when set, is where /healthz, /readyz and /metrics are
	// served, as each service binary's --http-addr does, for the whole
	// system: every service's metrics and the agents' (together) in one
	// registry, ready once every service and agent is.
	HTTPAddr string
}

func (o *Options) setDefaults() {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.NATSCluster < 1 {
		o.NATSCluster = 1
	}
	if o.Settings.NodeLease <= 0 {
		o.Settings = contract.DefaultSettings()
		o.Settings.Replicas = o.NATSCluster
	}
}

// check reports options that cannot run, naming the flag.
func (o *Options) check() error {
	if o.Agents < 0 {
		return fmt.Errorf("--agents %d is negative", o.Agents)
	}
	if o.NATSCluster != 1 && o.NATSCluster != 3 {
		return fmt.Errorf("--nats-cluster %d: want 1 (one server) or 3 (a cluster that survives one server stopping)", o.NATSCluster)
	}
	if o.RegistryDeleteAfter != nil {
		if err := configurator.CheckDeleteAfter(*o.RegistryDeleteAfter); err != nil {
			return fmt.Errorf("--registry-delete-after %s: %w", *o.RegistryDeleteAfter, err)
		}
	}
	if o.Settings.Replicas > o.NATSCluster {
		return fmt.Errorf("--replicas %d needs as many servers: pass --nats-cluster 3, or --replicas 1", o.Settings.Replicas)
	}
	return o.Settings.Validate()
}

// storeDirs are the NATS servers' store directories under the data directory.
func (o *Options) storeDirs() []string {
	if o.NATSCluster == 1 {
		return []string{filepath.Join(o.DataDir, "nats")}
	}
	dirs := make([]string, o.NATSCluster)
	for i := range dirs {
		dirs[i] = filepath.Join(o.DataDir, fmt.Sprintf("nats-%d", i+1))
	}
	return dirs
}

// System is a running dev system.
type System struct {
	opts    Options
	srv     *server.Server    // one server, or
	cluster *embedded.Cluster // a cluster
	lock    *os.File          // the data directory's lock, held until Stop
	log     zerolog.Logger
	logFile *os.File
	logPath string
	nodes   []string
	seeded  Seed
	// registries are every registry stored when it started: those of
	// --redis and --watch-dir, and those an earlier start or 'sluice
	// registry add' stored, which the configurator syncs as well.
	registries []*sluicev1.RegistrySpec
	// dashboardURL is the dashboard's page, "" when none runs.
	dashboardURL string
	// metrics is the registry /metrics serves (HTTPAddr); readies say
	// whether each service and agent is ready.
	metrics  *prometheus.Registry
	readies  []readier
	httpAddr string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when ctx ends or a service fails

	mu    sync.Mutex
	conns []*nats.Conn
	errs  []error

	stopOnce sync.Once
	stopErr  error

	creds *creds.Setup // with --secure
}

// Seed says what the examples did on this start.
type Seed struct {
	// FirstStart: the data directory had no intents and no head.
	FirstStart bool
	// Intents is how many intents were applied from the examples.
	Intents int
	// Revision is the revision the examples made the head, "" if none.
	Revision string
}

// Start starts the server, the services and the agents, then on a first
// start applies the examples. The system runs until ctx ends, a service
// fails or Stop is called; Wait then returns.
func Start(ctx context.Context, opts Options) (_ *System, err error) {
	opts.setDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	lock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	if err := checkLayout(opts); err != nil {
		_ = lock.Close()
		return nil, err
	}
	s := &System{opts: opts, lock: lock, done: make(chan struct{}), logPath: filepath.Join(opts.DataDir, "sluice.log"), metrics: newRegistry()}
	if s.logFile, err = os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("log file: %w", err)
	}
	if s.log, err = newLogger(s.logFile, opts.Stderr, opts.LogLevel, opts.Verbose); err != nil {
		_ = s.logFile.Close()
		_ = lock.Close()
		return nil, fmt.Errorf("log level %q: %w", opts.LogLevel, err)
	}
	if err := s.loadCreds(); err != nil {
		_ = s.logFile.Close()
		_ = lock.Close()
		return nil, err
	}
	if err := s.startNATS(); err != nil {
		_ = s.logFile.Close()
		_ = lock.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	go func() {
		<-runCtx.Done()
		close(s.done)
	}()
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	s.log.Info().Str("url", s.URL()).Str("data", opts.DataDir).Int("agents", opts.Agents).
		Int("nats_servers", opts.NATSCluster).Int("replicas", opts.Settings.Replicas).Msg("sluice dev starting")

	first, err := s.firstStart(runCtx)
	if err != nil {
		return nil, err
	}
	if err := s.storeRegistries(runCtx); err != nil {
		return nil, err
	}
	if err := s.startServices(runCtx); err != nil {
		return nil, err
	}
	if opts.Dashboard != nil {
		url, serve, err := opts.Dashboard(s)
		if err != nil {
			return nil, fmt.Errorf("dashboard: %w", err)
		}
		s.dashboardURL = url
		s.run(runCtx, "dashboard", serve)
	}
	agentsSince := time.Now().Add(-time.Second) // slack for clock rounding in the stored timestamp
	if err := s.startAgents(runCtx); err != nil {
		return nil, err
	}
	if opts.HTTPAddr != "" {
		if err := s.serveHTTP(runCtx, opts.HTTPAddr); err != nil {
			return nil, err
		}
	}
	if err := s.waitConfigurator(runCtx); err != nil {
		return nil, err
	}
	if err := s.waitAgents(runCtx, agentsSince); err != nil {
		return nil, err
	}
	s.seeded.FirstStart = first
	if first && opts.Examples != "" {
		if s.seeded, err = s.applyExamples(runCtx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// startNATS starts the embedded server, or the cluster.
func (s *System) startNATS() error {
	dirs := s.opts.storeDirs()
	if len(dirs) == 1 {
		if err := checkListen(s.opts.Listen); err != nil {
			return err
		}
		trust, err := s.trust()
		if err != nil {
			return err
		}
		srv, err := embedded.Start(embedded.Options{Listen: s.opts.Listen, StoreDir: dirs[0], Trust: trust})
		s.srv = srv
		return err
	}
	host, portStr, err := net.SplitHostPort(s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", s.opts.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("listen address %q: port: %w", s.opts.Listen, err)
	}
	ports := make([]int, len(dirs))
	for i := range ports {
		ports[i] = -1
		if port > 0 {
			ports[i] = port + i
			if err := checkListen(net.JoinHostPort(host, strconv.Itoa(port+i))); err != nil {
				return err
			}
		}
	}
	co := embedded.ClusterOptions{Name: "sluice-dev", Host: host, Ports: ports, StoreDirs: dirs}
	if co.Trust, err = s.trust(); err != nil {
		return err
	}
	s.cluster, err = embedded.StartCluster(co)
	return err
}

// checkLayout refuses a data directory made with another number of NATS
// servers (its state is in the other layout's store directories), or made
// with --secure when started without, or the other way round (the state is
// in another account).
func checkLayout(o Options) error {
	single := filepath.Join(o.DataDir, "nats")
	first := filepath.Join(o.DataDir, "nats-1")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	secured := exists(filepath.Join(o.CredsDir(), "operator.nk"))
	switch {
	case secured && !o.Secure:
		return fmt.Errorf("data directory %s was made with --secure: pass --secure, or --data with another directory", o.DataDir)
	case !secured && o.Secure && (exists(single) || exists(first)):
		return fmt.Errorf("data directory %s was made without --secure (its state is in the unauthenticated account): start without --secure, or pass --data with another directory", o.DataDir)
	case o.NATSCluster == 1 && exists(first) && !exists(single):
		return fmt.Errorf("data directory %s was made with --nats-cluster 3: pass --nats-cluster 3, or --data with another directory", o.DataDir)
	case o.NATSCluster > 1 && exists(single) && !exists(first):
		return fmt.Errorf("data directory %s was made with one NATS server: start without --nats-cluster, or pass --data with another directory", o.DataDir)
	}
	return nil
}

// URL is the NATS URL clients connect to: with a cluster, every server's
// URL, comma-separated (as nats.Connect and SLUICE_NATS_URL take them).
func (s *System) URL() string {
	if s.cluster != nil {
		return s.cluster.URL()
	}
	return s.srv.ClientURL()
}

// Cluster is the NATS cluster, nil with one server.
func (s *System) Cluster() *embedded.Cluster { return s.cluster }

// HTTPAddr is where /healthz, /readyz and /metrics are served, "" when
// nowhere.
func (s *System) HTTPAddr() string { return s.httpAddr }

// DashboardURL is the dashboard's page, "" when none runs.
func (s *System) DashboardURL() string { return s.dashboardURL }

// Nodes are the names of the agents' nodes, in order.
func (s *System) Nodes() []string { return s.nodes }

// Seeded says whether this start applied the examples.
func (s *System) Seeded() Seed { return s.seeded }

// LogPath is the file every service logs to.
func (s *System) LogPath() string { return s.logPath }

// Done is closed when the system is stopping: its ctx ended, a service
// failed or Stop was called.
func (s *System) Done() <-chan struct{} { return s.done }

// Wait waits until the system is stopping, stops it and returns the errors
// of services that failed.
func (s *System) Wait() error {
	<-s.done
	return s.Stop()
}

// Stop cancels every service, waits for them, closes their connections and
// shuts the server down. It is safe to call more than once; every call
// returns the errors of services that failed.
func (s *System) Stop() error {
	s.stopOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.mu.Lock()
		conns := s.conns
		s.conns = nil
		s.stopErr = errors.Join(s.errs...)
		s.mu.Unlock()
		for _, nc := range conns {
			// Drain-free close: every service has returned, nothing is in flight.
			nc.Close()
		}
		if s.cluster != nil {
			s.cluster.Shutdown()
		} else {
			s.srv.Shutdown()
			s.srv.WaitForShutdown()
		}
		s.log.Info().Msg("sluice dev stopped")
		_ = s.logFile.Close()
		_ = s.lock.Close() // releases the flock
	})
	return s.stopErr
}

// roleOf is the credentials role each of dev's own connections uses with
// --secure: the services their own, the set-up connection the coordinator's
// (it creates every bucket, the lease's included), the rest the admin's.
var roleOf = map[string]string{
	"setup": creds.RoleCoordinator, configurator.Component: creds.RoleConfigurator,
	coordinator.Component: creds.RoleCoordinator, reaper.Component: creds.RoleReaper,
}

// connect opens a connection named for its user, closed by Stop; with
// --secure, with the credentials of its role (roleOf, else admin).
func (s *System) connect(name string) (*nats.Conn, error) {
	return s.connectAs(name, cmp.Or(roleOf[name], creds.RoleAdmin), "")
}

// connectAs opens a connection named name with the credentials of role
// (and node, for a node) when --secure, closed by Stop.
func (s *System) connectAs(name, role, node string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("sluice-dev-" + name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.log.Error().Err(err).Str("connection", name).Str("role", role).Msg("NATS reported an error")
		}),
	}
	if node != "" {
		opts = append(opts, nats.CustomInboxPrefix(creds.NodeInboxPrefix(node)))
	}
	if s.creds != nil {
		file, err := s.credsFile(role, node)
		if err != nil {
			return nil, fmt.Errorf("credentials for %s: %w", name, err)
		}
		opts = append(opts, nats.UserCredentials(file))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

// run runs a service until ctx ends; a service that fails stops the system.
func (s *System) run(ctx context.Context, name string, f func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.Error().Err(err).Str(logging.FieldComponent, name).Msg("service failed; stopping sluice dev")
		s.mu.Lock()
		s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
		s.mu.Unlock()
		s.cancel()
	}()
}

// firstStart creates the buckets and reports whether the data directory is
// new: no intents and no head. The head counts too, so that deleting every
// intent does not bring the examples back on the next start.
func (s *System) firstStart(ctx context.Context) (bool, error) {
	nc, err := s.connect("setup")
	if err != nil {
		return false, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return false, fmt.Errorf("jetstream: %w", err)
	}
	if err := contract.Ensure(ctx, js, s.opts.Settings); err != nil {
		return false, err
	}
	b, err := contract.OpenBuckets(ctx, js)
	if err != nil {
		return false, err
	}
	keys, err := store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).Keys(ctx)
	if err != nil {
		return false, err
	}
	_, err = store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return len(keys) == 0, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

func (s *System) startServices(ctx context.Context) error {
	settings, log := s.opts.Settings, s.log
	nc, err := s.connect(configurator.Component)
	if err != nil {
		return err
	}
	cfgr, err := configurator.New(configurator.Config{Conn: nc, Settings: settings, Log: log, Version: s.opts.Version, DeleteAfter: s.opts.RegistryDeleteAfter,
		Metrics: configurator.NewMetrics(s.metrics)})
	if err != nil {
		return err
	}
	s.run(ctx, configurator.Component, cfgr.Run)
	s.readies = append(s.readies, readier{configurator.Component, cfgr.Ready})

	if nc, err = s.connect(coordinator.Component); err != nil {
		return err
	}
	coord, err := coordinator.New(coordinator.Config{Conn: nc, Settings: settings, Log: log, Instance: "dev", Version: s.opts.Version,
		Metrics: coordinator.NewMetrics(s.metrics)})
	if err != nil {
		return err
	}
	s.run(ctx, coordinator.Component, coord.Run)
	s.readies = append(s.readies, readier{coordinator.Component, coord.Ready})

	if nc, err = s.connect(reaper.Component); err != nil {
		return err
	}
	rp, err := reaper.New(reaper.Config{Conn: nc, Settings: settings, Log: log, Version: s.opts.Version,
		Metrics: reaper.NewMetrics(s.metrics)})
	if err != nil {
		return err
	}
	s.run(ctx, reaper.Component, rp.Run)
	s.readies = append(s.readies, readier{reaper.Component, rp.Ready})
	return nil
}

// startAgents starts one agent per node, each on its own connection whose
// reconnects make the agent fetch its desired config again.
func (s *System) startAgents(ctx context.Context) error {
	agentMetrics := agent.NewMetrics(s.metrics) // every agent's applies and checks, together
	for i := range s.opts.Agents {
		node := NodeName(i, s.opts.Agents)
		dir := filepath.Join(s.opts.DataDir, "agents", node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("agent %s: %w", node, err)
		}
		nc, err := s.connectAs(node, creds.RoleNode, node)
		if err != nil {
			return err
		}
		checks := make([]agent.CheckSpec, len(s.opts.CheckCmds))
		for i, c := range s.opts.CheckCmds {
			checks[i] = agent.CheckSpec{Check: agent.ExecCheck{Command: c}}
		}
		a, err := agent.New(agent.Config{
			Conn: nc, Settings: s.opts.Settings, Log: s.log,
			Node: node, Labels: NodeLabels(i), StateDir: dir,
			Applier: agent.NewFileApplier(filepath.Join(dir, "config.json")),
			Checks:  checks,
			Version: s.opts.Version,
			Metrics: agentMetrics,
		})
		if err != nil {
			return err
		}
		nc.SetReconnectHandler(func(*nats.Conn) { a.Reconnected() })
		s.nodes = append(s.nodes, node)
		s.readies = append(s.readies, readier{"agent " + node, a.Ready})
		s.run(ctx, "agent "+node, a.Run)
	}
	return nil
}

// NodeName names the i-th (0-based) of n dev nodes: node-01 … node-99, and
// with more than 99 nodes node-001 ….
func NodeName(i, n int) string {
	width := max(2, len(strconv.Itoa(n)))
	return fmt.Sprintf("node-%0*d", width, i+1)
}

// NodeLabels spreads dev nodes over three zones and, within them, two racks,
// so that selectors and failure domains have something to choose from.
func NodeLabels(i int) map[string]string {
	return map[string]string{
		"zone": fmt.Sprintf("zone-%c", 'a'+i%3),
		"rack": fmt.Sprintf("rack-%d", 1+i/3%2),
	}
}

// checkListen fails early, and clearly, when the address is taken.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if port == "-1" || port == "0" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s (%w): is another `sluice dev` running? Stop it, or pass --listen with another port", addr, err)
	}
	return l.Close()
}

// CredsDir is where --secure keeps its credentials setup.
func (o Options) CredsDir() string { return filepath.Join(o.DataDir, "creds") }

// AdminCreds is the admin user's credentials file with --secure: the
// CLI's (SLUICE_NATS_CREDS).
func (s *System) AdminCreds() string {
	if s.creds == nil {
		return ""
	}
	file, err := s.credsFile(creds.RoleAdmin, "")
	if err != nil {
		return ""
	}
	return file
}

// Creds is the credentials setup with --secure, else nil.
func (s *System) Creds() *creds.Setup { return s.creds }

// loadCreds loads the credentials setup of a --secure data directory,
// making it on the first secure start.
func (s *System) loadCreds() error {
	if !s.opts.Secure {
		return nil
	}
	dir := s.opts.CredsDir()
	var err error
	if _, serr := os.Stat(filepath.Join(dir, "operator.nk")); serr == nil {
		s.creds, err = creds.Load(dir)
	} else {
		s.creds, err = creds.Init(dir, creds.InitOptions{ResolverDir: filepath.Join(s.opts.storeDirs()[0], "jwt")})
	}
	if err != nil {
		return fmt.Errorf("--secure: credentials in %s: %w", dir, err)
	}
	return nil
}

// credsFile is the credentials file of a user of role (and node) issued
// from the setup, issuing one the first time.
func (s *System) credsFile(role, node string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creds.UserFile(role, node)
}

// trust is what the embedded servers trust with --secure, nil without.
func (s *System) trust() (*embedded.Trust, error) {
	if s.creds == nil {
		return nil, nil
	}
	op, sys, accounts, err := s.creds.Trust()
	if err != nil {
		return nil, err
	}
	return &embedded.Trust{Operator: op, SystemAccount: sys, Accounts: accounts}, nil
}
