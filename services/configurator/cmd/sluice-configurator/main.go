// Command sluice-configurator runs the configurator: the intents and
// revisions API on NATS.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/services/configurator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("sluice-configurator", flag.ContinueOnError)
	server := fs.String("server", envOr("SLUICE_NATS_URL", nats.DefaultURL), "NATS URL (env SLUICE_NATS_URL)")
	source := fs.String("source", configurator.DefaultSource, "source recorded on applied intents when a request names none")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := logging.New(os.Stderr, *logLevel, false)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--log-level: %v\n", err)
		return 2
	}
	nc, err := nats.Connect(*server, nats.Name("sluice-configurator"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	if err != nil {
		log.Error().Err(err).Str("server", *server).Msg("connect to NATS")
		return 1
	}
	defer nc.Close()
	svc, err := configurator.New(configurator.Config{Conn: nc, Settings: contract.DefaultSettings(), Log: log, Source: *source})
	if err != nil {
		log.Error().Err(err).Msg("configure")
		return 2
	}
	if err := svc.Run(ctx); err != nil {
		log.Error().Err(err).Msg("configurator stopped")
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
