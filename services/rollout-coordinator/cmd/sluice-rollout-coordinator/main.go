// Command sluice-rollout-coordinator runs the leader-elected rollout-coordinator.
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
	// Time zones for strategy windows (contract.ParseWindow): the images are
	// FROM scratch, with no zoneinfo.
	_ "time/tzdata"

	"github.com/sluicehq/sluice/pkg/cmdutil"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice-rollout-coordinator", flag.ContinueOnError)
	var common cmdutil.Common
	common.Register(fs)
	common.RegisterLeaderLease(fs)
	instance := fs.String("instance", "", "name in the leader lease (default host-pid)")
	retention := fs.Int("rollout-retention", coordinator.DefaultRetention, "ended rollout records kept; older ones are deleted when a rollout finishes (-1 keeps all)")
	expiry := fs.Duration("invalid-expiry", 0, "forgive a fingerprint recorded invalid this long ago (0: never)")
	verify := fs.Duration("verify-interval", time.Minute, "how often the leader lists the nodeconfigs keys and configures afresh a node whose desired config was deleted unheard")
	gateTimeout := fs.Duration("gate-timeout", 10*time.Second, "bound on each request to Prometheus for a rollout's gates (a request that times out makes the gate wait, never pass)")
	return common.Main(ctx, fs, args, stderr, nil, func(rt cmdutil.Runtime) (cmdutil.Service, error) {
		return coordinator.New(coordinator.Config{Conn: rt.Conn, Settings: common.Settings(), Log: rt.Log, Instance: *instance,
			Retention: *retention, InvalidExpiry: *expiry, VerifyInterval: *verify, Version: cmdutil.Version, Metrics: coordinator.NewMetrics(rt.Metrics),
			GateTimeout: *gateTimeout})
	})
}
