// Command sluice-reaper runs sluice's garbage collector: it deletes the keys
// of nodes whose presence has been gone for longer than the grace period.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/services/reaper"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-reaper", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common cmdutil.Common
	common.Register(fs)
	grace := fs.Duration("grace", reaper.DefaultGrace, "how long a node's presence must be gone before its keys are deleted")
	interval := fs.Duration("interval", reaper.DefaultInterval, "how often to look for departed nodes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := common.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-reaper: %v\n", err)
		return 2
	}
	if *grace < time.Second || *interval < time.Second {
		fmt.Fprintln(stderr, "sluice-reaper: --grace and --interval must be at least 1s")
		return 2
	}
	nc, err := common.Connect("sluice-reaper")
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 1
	}
	defer nc.Close()
	r, err := reaper.New(reaper.Config{
		Conn:     nc,
		Settings: contract.DefaultSettings(),
		Log:      log,
		Grace:    *grace,
		Interval: *interval,
	})
	if err != nil {
		log.Error().Err(err).Msg("configure reaper")
		return 2
	}
	if err := r.Run(ctx); err != nil {
		log.Error().Err(err).Msg("reaper stopped")
		return 1
	}
	return 0
}
