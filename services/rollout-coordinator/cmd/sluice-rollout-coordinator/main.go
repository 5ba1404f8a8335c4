// Command sluice-rollout-coordinator runs the leader-elected rollout-coordinator.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/cmdutil"
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
	common.RegisterLeaderLease(fs)
	instance := fs.String("instance", "", "name in the leader lease (default host-pid)")
	retention := fs.Int("rollout-retention", coordinator.DefaultRetention, "ended rollout records kept; older ones are deleted when a rollout finishes (-1 keeps all)")
	expiry := fs.Duration("invalid-expiry", 0, "forgive a fingerprint recorded invalid this long ago (0: never)")
	return common.Main(ctx, fs, args, os.Stderr, nil, func(nc *nats.Conn, log zerolog.Logger) (cmdutil.Service, error) {
		return coordinator.New(coordinator.Config{Conn: nc, Settings: common.Settings(), Log: log, Instance: *instance,
			Retention: *retention, InvalidExpiry: *expiry})
	})
}
