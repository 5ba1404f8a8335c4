// Command sluice-configurator runs the configurator: the intents API, validation and revisions.
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/services/configurator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-configurator", flag.ContinueOnError)
	var common cmdutil.Common
	common.Register(fs)
	source := fs.String("source", configurator.DefaultSource, "source recorded on applied intents when a request names none")
	fetchTimeout := fs.Duration("registry-fetch-timeout", 30*time.Second, "bound on one read of a registry (Redis, directory); a read that takes longer counts as unreachable")
	return common.Main(ctx, fs, args, stderr, nil, func(rt cmdutil.Runtime) (cmdutil.Service, error) {
		return configurator.New(configurator.Config{Conn: rt.Conn, Settings: common.Settings(), Log: rt.Log, Source: *source,
			FetchTimeout: *fetchTimeout, Version: cmdutil.Version, Metrics: configurator.NewMetrics(rt.Metrics)})
	})
}
