// Command sluice-agent runs sluice's node agent on one node: it registers the
// node, applies its desired config through an applier, runs health checks,
// restores the last-good config when they fail and reports the node's status.
// Flags and the --config file are read in config.go; docs/agent.md lists them.
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicehq/sluice/pkg/kubenode"
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
	if o.common.Probe != "" {
		return o.common.ProbeExit(ctx, stderr)
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
	for _, w := range o.warnings {
		log.Warn().Msg(w)
	}
	// Serves --http-addr and waits for NATS (a stop meanwhile is clean).
	p, err := o.common.Start(ctx, "sluice-agent "+cfg.Node, log)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		log.Error().Err(err).Msg("start")
		return 1
	}
	defer p.Close()
	nc := p.Conn
	cfg.Conn, cfg.Settings, cfg.Log, cfg.Version = nc, o.common.Settings(), log, version
	cfg.Metrics = agent.NewMetrics(p.Registry)
	if o.kubeNodeLabels {
		client, err := kubenode.NewClient(o.kubeconfig)
		if err == nil {
			cfg.Labels, cfg.LabelUpdates, cfg.Departures, err = followNode(ctx, client, cfg.Node, cfg.Labels, log)
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			log.Error().Err(err).Msg("--kube-node-labels")
			return 1
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		log.Error().Err(err).Msg("configure agent")
		return 2
	}
	p.SetReadiness(a.Ready)
	// After a reconnect, republished writes made while away are lost: fetch.
	nc.SetReconnectHandler(func(*nats.Conn) { a.Reconnected() })
	if err := a.Run(ctx); err != nil {
		log.Error().Err(err).Msg("agent stopped")
		return 1
	}
	return 0
}

// followNode reads the labels of the Kubernetes Node named node and follows
// them: the Node's labels with extra (--labels) on top, now and on every
// change; and the Node's deletion (the node left) and creation again (it
// is back), in the order they happened.
func followNode(ctx context.Context, client kubernetes.Interface, node string, extra map[string]string, log zerolog.Logger) (map[string]string, <-chan map[string]string, <-chan agent.Departure, error) {
	in, err := kubenode.Watch(ctx, client, node, log)
	if err != nil {
		return nil, nil, nil, err
	}
	merge := func(l map[string]string) map[string]string {
		out := maps.Clone(l)
		if out == nil {
			out = map[string]string{}
		}
		maps.Copy(out, extra)
		return out
	}
	var first map[string]string
	select {
	case n, ok := <-in:
		if !ok {
			return nil, nil, nil, ctx.Err()
		}
		first = merge(n.Labels)
	case <-ctx.Done():
		return nil, nil, nil, ctx.Err()
	}
	labels, departures := make(chan map[string]string), make(chan agent.Departure)
	go func() {
		last, gone := first, false
		for n := range in {
			if l := merge(n.Labels); !n.Deleted && !maps.Equal(l, last) {
				select {
				case labels <- l:
					last = l
				case <-ctx.Done():
					return
				}
			}
			if n.Deleted == gone {
				continue
			}
			gone = n.Deleted
			d := agent.Departure{Gone: true, Reason: "its Kubernetes Node " + node + " was deleted"}
			if !gone {
				d = agent.Departure{Reason: "its Kubernetes Node " + node + " was created again"}
			}
			select {
			case departures <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
	return first, labels, departures, nil
}
