// Command sluice-reaper runs sluice's garbage collector: it deletes the keys
// of nodes whose presence has been gone for longer than the grace period.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/cmdutil"
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
	var common cmdutil.Common
	common.Register(fs)
	grace := fs.Duration("grace", reaper.DefaultGrace, "how long a node's presence must be gone before its keys are deleted")
	interval := fs.Duration("interval", reaper.DefaultInterval, "how often to look for departed nodes")
	keepRevs := fs.Int("revision-retention", reaper.DefaultRevisionRetention, "revisions kept besides the referenced ones (-1 keeps all)")
	holdShare := fs.Float64("hold-share", reaper.DefaultHoldShare, "hold deletions when more than this share of the nodes departed at once (at least two), until `sluice reaper confirm`; 1 turns the guard off")
	check := func() error {
		if *grace < time.Second || *interval < time.Second {
			return errors.New("--grace and --interval must be at least 1s")
		}
		return nil
	}
	return common.Main(ctx, fs, args, stderr, check, func(rt cmdutil.Runtime) (cmdutil.Service, error) {
		return reaper.New(reaper.Config{Conn: rt.Conn, Settings: common.Settings(), Log: rt.Log, Grace: *grace, Interval: *interval, HoldShare: *holdShare,
			RevisionRetention: *keepRevs, Version: cmdutil.Version, Metrics: reaper.NewMetrics(rt.Metrics)})
	})
}
