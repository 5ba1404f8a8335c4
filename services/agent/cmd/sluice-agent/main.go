// Command sluice-agent runs sluice's node agent on one node: it registers the
// node, applies its desired config through an applier, runs health checks,
// restores the last-good config when they fail and reports the node's status.
// Flags and the --config file are read in config.go; docs/agent.md lists them.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/services/agent"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	var o options
	fs := o.flagSet(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := o.common.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-agent: %v\n", err)
		return 2
	}
	cfg, err := o.agentConfig(fs)
	if err == nil {
		err = o.common.Check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice-agent: %v\n", err)
		return 2
	}
	nc, err := o.common.Connect("sluice-agent " + cfg.Node)
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 1
	}
	defer nc.Close()
	cfg.Conn, cfg.Settings, cfg.Log, cfg.Version = nc, o.common.Settings(), log, version
	a, err := agent.New(cfg)
	if err != nil {
		log.Error().Err(err).Msg("configure agent")
		return 2
	}
	// After a reconnect, republished writes made while away are lost: fetch.
	nc.SetReconnectHandler(func(*nats.Conn) { a.Reconnected() })
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("agent stopped")
		return 1
	}
	return 0
}
