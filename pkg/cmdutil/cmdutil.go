// Package cmdutil holds what the thin mains of sluice's service binaries
// share: the --server and --log-level flags, the logger and the connection.
package cmdutil

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/logging"
)

// EnvServer is the environment variable naming the NATS URL.
const EnvServer = "SLUICE_NATS_URL"

// Common are the flags every service binary takes.
type Common struct {
	Server   string
	LogLevel string
}

// Register adds --server (default $SLUICE_NATS_URL, else nats://127.0.0.1:4222) and --log-level to fs.
func (c *Common) Register(fs *flag.FlagSet) {
	def := os.Getenv(EnvServer)
	if def == "" {
		def = nats.DefaultURL
	}
	fs.StringVar(&c.Server, "server", def, "NATS URL (env "+EnvServer+")")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
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
