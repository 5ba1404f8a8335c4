// Package cmdutil holds what the thin mains of sluice's service binaries
// share: the --server, --log-level, --replicas, --http-addr and --probe
// flags, the connection's credentials and TLS flags (pkg/natsauth), and
// --leader-lease for the coordinator, the logger, the settings,
// the build Version, and the Process: the health and metrics endpoint and
// the connection to NATS, retried until it answers (process.go).
// Entry point: Common.Main (the agent, which builds its own config, uses
// Common.Start).
package cmdutil

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/health"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/natsauth"
)

// Environment variables that set flags' defaults.
const (
	EnvServer      = "SLUICE_NATS_URL"     // --server
	EnvReplicas    = "SLUICE_REPLICAS"     // --replicas
	EnvLeaderLease = "SLUICE_LEADER_LEASE" // --leader-lease
	EnvNodeLease   = "SLUICE_NODE_LEASE"   // --node-lease
	EnvHTTPAddr    = "SLUICE_HTTP_ADDR"    // --http-addr
	EnvLogFormat   = "SLUICE_LOG_FORMAT"   // --log-format
)

// Common are the flags every service binary takes.
type Common struct {
	Server    string
	LogLevel  string
	LogFormat string
	// Replicas of the buckets this service manages, and the least it
	// accepts on the buckets it binds.
	Replicas int
	// NodeLease is set by --node-lease (RegisterLeaderLease).
	NodeLease time.Duration
	// LeaderLease is set by --leader-lease (RegisterLeaderLease).
	LeaderLease time.Duration
	// HTTPAddr is where /healthz, /readyz and /metrics are served ("": nowhere).
	HTTPAddr string
	// Probe, when set, is a URL to GET instead of running the service
	// (ProbeExit): for container probes in images without curl.
	Probe string
	// Auth are the connection's credentials and TLS (--creds, --tls-ca, …).
	Auth natsauth.Options
	// InboxPrefix, when set, is the connection's inbox prefix: an agent's
	// credentials allow replies under its own prefix only
	// (creds.NodeInboxPrefix).
	InboxPrefix string

	envErrs []error // environment variables that did not parse
}

// Register adds --server (default $SLUICE_NATS_URL, else nats://127.0.0.1:4222;
// a comma-separated list names every server of a cluster), --log-level,
// --replicas (default $SLUICE_REPLICAS, else 1), --http-addr (default
// $SLUICE_HTTP_ADDR, else off) and --probe to fs.
func (c *Common) Register(fs *flag.FlagSet) {
	def := os.Getenv(EnvServer)
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.Server, "server", def, "NATS URL, or comma-separated URLs of a cluster's servers (env "+EnvServer+")")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", cmp.Or(os.Getenv(EnvLogFormat), logging.FormatAuto),
		"log format: json (a JSON object a line), text (for reading by hand), or auto: text on a terminal, else json (env "+EnvLogFormat+")")
	replicas := contract.DefaultSettings().Replicas
	if v, ok := os.LookupEnv(EnvReplicas); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: want a number of replicas, 1 to %d", EnvReplicas, v, contract.MaxReplicas))
		}
		replicas = n
	}
	fs.IntVar(&c.Replicas, "replicas", replicas,
		"replicas of every bucket and stream: 1 on a single server, 3 on a cluster across failure domains (env "+EnvReplicas+")")
	fs.StringVar(&c.HTTPAddr, "http-addr", os.Getenv(EnvHTTPAddr),
		"address (host:port) to serve /healthz, /readyz and /metrics on; empty: not served (env "+EnvHTTPAddr+")")
	fs.StringVar(&c.Probe, "probe", "",
		"GET this URL (e.g. http://127.0.0.1:9090/readyz) within 2s, print the answer and exit 0 on 200, else 1; runs nothing else")
	c.LeaderLease = contract.DefaultSettings().LeaderLease
	// Every binary takes SLUICE_NODE_LEASE (only the rollout-coordinator,
	// which sets the nodes bucket's TTL, has the flag): an agent started
	// with the environment its coordinator has beats for that lease from
	// its first beat, before it reads the bucket's TTL.
	c.NodeLease = c.envDuration(EnvNodeLease, contract.DefaultSettings().NodeLease)
	c.Auth.Register(fs)
}

// RegisterLeaderLease adds the rollout-coordinator's leases to fs:
// --leader-lease (default $SLUICE_LEADER_LEASE, else 2s; at least 1s) and
// --node-lease (default $SLUICE_NODE_LEASE, else 3m; at least 1s), the TTL
// of the nodes bucket it manages, which agents take as they find it.
func (c *Common) RegisterLeaderLease(fs *flag.FlagSet) {
	def := contract.DefaultSettings()
	fs.DurationVar(&c.LeaderLease, "leader-lease", c.envDuration(EnvLeaderLease, def.LeaderLease),
		"how long the leader's lease lasts without renewal (renewed every quarter of it); a standby takes over within about this after the leader dies, at once after a clean stop. "+
			"It sets the leases bucket's TTL only when no coordinator holds the lease; started beside a leader, a coordinator keeps the TTL and leads by it (env "+EnvLeaderLease+", at least 1s)")
	// c.NodeLease already holds $SLUICE_NODE_LEASE (Register read it).
	fs.DurationVar(&c.NodeLease, "node-lease", c.NodeLease,
		"how long a node's presence lasts without a heartbeat (agents beat every third of it): a node that stops is skipped by a rollout within it; "+
			"3m keeps heartbeats at 17 writes/s per 1,000 nodes (env "+EnvNodeLease+", at least 1s)")
}

// envDuration is the duration in the environment variable name, else def;
// one that does not parse is reported by Check.
func (c *Common) envDuration(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: want a duration such as %s", name, v, def))
	}
	return d
}

// Settings are the contract settings the flags ask for.
func (c *Common) Settings() contract.Settings {
	s := contract.DefaultSettings()
	s.Replicas, s.LeaderLease, s.NodeLease = c.Replicas, c.LeaderLease, c.NodeLease
	return s
}

// Check reports environment variables that did not parse and settings no
// bucket can be made with, naming the flag or variable.
func (c *Common) Check() error {
	_, authErr := c.Auth.NATS()
	return errors.Join(errors.Join(c.envErrs...), c.Settings().Validate(), authErr)
}

// Logger returns the logger at the chosen level, in the chosen format.
func (c *Common) Logger(w io.Writer) (zerolog.Logger, error) {
	pretty, err := logging.Pretty(c.LogFormat, w)
	if err != nil {
		return zerolog.Nop(), fmt.Errorf("--log-format %w", err)
	}
	log, err := logging.New(w, c.LogLevel, pretty)
	if err != nil {
		return log, fmt.Errorf("--log-level: %w", err)
	}
	return log, nil
}

// ProbeExit runs the --probe mode: it GETs c.Probe, writes the answer to
// out and returns the exit code (0 on 200, 1 otherwise).
func (c *Common) ProbeExit(ctx context.Context, out io.Writer) int {
	return health.Probe(ctx, c.Probe, out)
}

// Service is what a binary runs: Run blocks until ctx ends.
type Service interface {
	Run(ctx context.Context) error
}

// Readier is a Service that says whether it is ready (see health.State):
// /readyz asks it while NATS is connected.
type Readier interface {
	Ready() (ok bool, why string)
}

// Runtime is what Main hands the function that builds the service.
type Runtime struct {
	Conn *nats.Conn
	Log  zerolog.Logger
	// Metrics is the process's registry, served at /metrics: the service
	// registers its own metrics on it.
	Metrics prometheus.Registerer
}

// Main parses args into fs (on which Register was called) and, with
// --probe, probes and exits. Otherwise it checks the flags with check (may
// be nil), serves --http-addr, connects as fs.Name() (retrying until NATS
// answers), builds the service and runs it until ctx ends. It returns the
// process exit code: 2 for bad flags or configuration, 1 when serving,
// connecting or running fails, 0 otherwise (ctx ending while it waits for
// NATS included).
func (c *Common) Main(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer,
	check func() error, build func(rt Runtime) (Service, error)) int {
	name := fs.Name()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.Probe != "" {
		return c.ProbeExit(ctx, stderr)
	}
	log, err := c.Logger(stderr)
	if err == nil {
		err = c.Check()
	}
	if err == nil && check != nil {
		err = check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	p, err := c.Start(ctx, name, log)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		log.Error().Err(err).Msg("start")
		return 1
	}
	defer p.Close()
	svc, err := build(Runtime{Conn: p.Conn, Log: log, Metrics: p.Registry})
	if err != nil {
		log.Error().Err(err).Msg("configure")
		return 2
	}
	if r, ok := svc.(Readier); ok {
		p.SetReadiness(r.Ready)
	}
	if err := svc.Run(ctx); err != nil {
		log.Error().Err(err).Msg(name + " stopped")
		return 1
	}
	return 0
}
