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
// undoes what the operator applied; and never when its agents have state
// (a last-good config): a store that was lost or wiped under them is not a
// first start (pkg/storeloss).
package dev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

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
	loss    *storeloss.Loss // the store found lost at start (pkg/storeloss), nil when it is not
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
	// Held says why the examples were not applied on a first start: the
	// agents in the data directory have state (their last-good config),
	// so the empty store is evidence of a lost one, not a clean slate.
	Held string
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
	if s.loss, err = s.readLoss(runCtx); err != nil {
		return nil, err
	}
	s.seeded.FirstStart = first
	if first && opts.Examples != "" {
		if s.seeded.Held, err = s.seedHeld(); err != nil {
			return nil, err
		}
		if s.seeded.Held != "" {
			s.log.Warn().Str(logging.FieldReason, s.seeded.Held).Msg("the examples are not applied: the data directory's agents have state")
			return s, nil
		}
		if s.seeded, err = s.applyExamples(runCtx); err != nil {
			return nil, err
		}
	}
	return s, nil
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

// Loss is the store loss found at start, nil when the store was not lost.
func (s *System) Loss() *storeloss.Loss { return s.loss }

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
