// Package cmdutil holds what the thin mains of sluice's service binaries
// share: the --server, --log-level and --replicas flags (and --leader-lease
// for the coordinator), the logger, the settings and the connection.
package cmdutil

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
)

// Environment variables that set flags' defaults.
const (
	EnvServer      = "SLUICE_NATS_URL"     // --server
	EnvReplicas    = "SLUICE_REPLICAS"     // --replicas
	EnvLeaderLease = "SLUICE_LEADER_LEASE" // --leader-lease
)

// Common are the flags every service binary takes.
type Common struct {
	Server   string
	LogLevel string
	// Replicas of the buckets this service manages, and the least it
	// accepts on the buckets it binds.
	Replicas int
	// LeaderLease is set by --leader-lease (RegisterLeaderLease).
	LeaderLease time.Duration

	envErrs []error // environment variables that did not parse
}

// Register adds --server (default $SLUICE_NATS_URL, else nats://127.0.0.1:4222;
// a comma-separated list names every server of a cluster), --log-level and
// --replicas (default $SLUICE_REPLICAS, else 1) to fs.
func (c *Common) Register(fs *flag.FlagSet) {
	def := os.Getenv(EnvServer)
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.Server, "server", def, "NATS URL, or comma-separated URLs of a cluster's servers (env "+EnvServer+")")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
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
	c.LeaderLease = contract.DefaultSettings().LeaderLease
}

// RegisterLeaderLease adds --leader-lease (default $SLUICE_LEADER_LEASE,
// else 10s; at least 1s) to fs: for the rollout-coordinator.
func (c *Common) RegisterLeaderLease(fs *flag.FlagSet) {
	lease := contract.DefaultSettings().LeaderLease
	if v, ok := os.LookupEnv(EnvLeaderLease); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			c.envErrs = append(c.envErrs, fmt.Errorf("%s=%q: want a duration such as 10s", EnvLeaderLease, v))
		}
		lease = d
	}
	fs.DurationVar(&c.LeaderLease, "leader-lease", lease,
		"how long the leader's lease lasts without renewal; a standby takes over within about twice this (env "+EnvLeaderLease+", at least 1s)")
}

// Settings are the contract settings the flags ask for.
func (c *Common) Settings() contract.Settings {
	s := contract.DefaultSettings()
	s.Replicas, s.LeaderLease = c.Replicas, c.LeaderLease
	return s
}

// Check reports environment variables that did not parse and settings no
// bucket can be made with, naming the flag or variable.
func (c *Common) Check() error {
	return errors.Join(errors.Join(c.envErrs...), c.Settings().Validate())
}

// Logger returns the JSON logger at the chosen level.
func (c *Common) Logger(w io.Writer) (zerolog.Logger, error) {
	log, err := logging.New(w, c.LogLevel, false)
	if err != nil {
		return log, fmt.Errorf("--log-level: %w", err)
	}
	return log, nil
}

// Connect connects as name, reconnecting forever: a service outlives NATS restarts.
func (c *Common) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)}, opts...)
	nc, err := nats.Connect(c.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", c.Server, err)
	}
	return nc, nil
}

// Service is what a binary runs: Run blocks until ctx ends.
type Service interface {
	Run(ctx context.Context) error
}

// Main parses args into fs (on which Register was called), checks the
// flags with check (may be nil), connects as fs.Name(), builds the service
// and runs it until ctx ends. It returns the process exit code: 2 for bad
// flags or configuration, 1 when connecting or running fails, 0 otherwise.
func (c *Common) Main(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer,
	check func() error, build func(nc *nats.Conn, log zerolog.Logger) (Service, error)) int {
	name := fs.Name()
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
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
	nc, err := c.Connect(name)
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 1
	}
	defer nc.Close()
	svc, err := build(nc, log)
	if err != nil {
		log.Error().Err(err).Msg("configure")
		return 2
	}
	if err := svc.Run(ctx); err != nil {
		log.Error().Err(err).Msg(name + " stopped")
		return 1
	}
	return 0
}
