// Command sluice-configurator runs the configurator: the intents API, validation and revisions.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/pkg/contract"
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
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := common.Logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	nc, err := common.Connect("sluice-configurator")
	if err != nil {
		log.Error().Err(err).Msg("start")
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
