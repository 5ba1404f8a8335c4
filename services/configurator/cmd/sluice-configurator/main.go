// Command sluice-configurator runs the configurator: the intents API, validation and revisions.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/services/configurator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("sluice-configurator", flag.ContinueOnError)
	var common cmdutil.Common
	common.Register(fs)
	source := fs.String("source", configurator.DefaultSource, "source recorded on applied intents when a request names none")
	fetchTimeout := fs.Duration("registry-fetch-timeout", 30*time.Second, "bound on one read of a registry (Redis, directory); a read that takes longer counts as unreachable")
	return common.Main(ctx, fs, args, os.Stderr, nil, func(nc *nats.Conn, log zerolog.Logger) (cmdutil.Service, error) {
		return configurator.New(configurator.Config{Conn: nc, Settings: common.Settings(), Log: log, Source: *source, FetchTimeout: *fetchTimeout})
	})
}
