// Command sluice-agent runs sluice's node agent on one node: it registers the
// node, applies its desired config and reports the node's status.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
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
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", envOr("SLUICE_NATS_URL", nats.DefaultURL), "NATS server URL (env SLUICE_NATS_URL)")
	node := fs.String("node", shortHostname(), "this node's name (default: the short host name, lower-cased)")
	labels := fs.String("labels", "", "this node's labels, k=v,k=v")
	stateDir := fs.String("state-dir", "/var/lib/sluice-agent", "directory for the last-good config")
	applier := fs.String("applier", "file", "how configs are applied: file")
	configPath := fs.String("config-path", "", "file the file applier writes (default <state-dir>/config.json)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := logging.New(stderr, *logLevel, false)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-agent: --log-level: %v\n", err)
		return 2
	}
	lbls, err := parseLabels(*labels)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-agent: --labels: %v\n", err)
		return 2
	}
	if *applier != "file" {
		fmt.Fprintf(stderr, "sluice-agent: --applier %q: the only applier is \"file\"\n", *applier)
		return 2
	}
	if *configPath == "" {
		*configPath = filepath.Join(*stateDir, "config.json")
	}

	nc, err := nats.Connect(*server, nats.Name("sluice-agent "+*node), nats.MaxReconnects(-1))
	if err != nil {
		log.Error().Err(err).Str("server", *server).Msg("connect to NATS")
		return 1
	}
	defer nc.Close()
	a, err := agent.New(agent.Config{
		Conn:     nc,
		Settings: contract.DefaultSettings(),
		Log:      log,
		Node:     *node,
		Labels:   lbls,
		StateDir: *stateDir,
		Applier:  agent.NewFileApplier(*configPath),
		Version:  version,
	})
	if err != nil {
		log.Error().Err(err).Msg("configure agent")
		return 2
	}
	// After a reconnect, republished writes made while away are lost: fetch.
	nc.SetReconnectHandler(func(*nats.Conn) { a.Resync() })
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("agent stopped")
		return 1
	}
	return 0
}

// parseLabels parses "k=v,k=v".
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not k=v", pair)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

func shortHostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(h, ".")
	return strings.ToLower(h)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
