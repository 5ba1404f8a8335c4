// Command sluice-rollout-coordinator runs the leader-elected rollout-coordinator.
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
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("sluice-rollout-coordinator", flag.ContinueOnError)
	var common cmdutil.Common
	common.Register(fs)
	instance := fs.String("instance", "", "name in the leader lease (default host-pid)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := common.Logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	nc, err := common.Connect("sluice-rollout-coordinator")
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 1
	}
	defer nc.Close()
	svc, err := coordinator.New(coordinator.Config{Conn: nc, Settings: contract.DefaultSettings(), Log: log, Instance: *instance})
	if err != nil {
		log.Error().Err(err).Msg("configure")
		return 2
	}
	if err := svc.Run(ctx); err != nil {
		log.Error().Err(err).Msg("rollout-coordinator stopped")
		return 1
	}
	return 0
}
