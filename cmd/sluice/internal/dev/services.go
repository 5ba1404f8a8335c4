package dev

// Starting the services and the agents of a dev system.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// run runs a service until ctx ends; a service that fails stops the system.
func (s *System) run(ctx context.Context, name string, f func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.Error().Err(err).Str(logging.FieldComponent, name).Msg("service failed; stopping sluice dev")
		s.mu.Lock()
		s.errs = append(s.errs, fmt.Errorf("%s: %w", name, err))
		s.mu.Unlock()
		s.cancel()
	}()
}

// firstStart creates the buckets and reports whether the data directory is
// new: no intents and no head. The head counts too, so that deleting every
// intent does not bring the examples back on the next start.
func (s *System) firstStart(ctx context.Context) (bool, error) {
	nc, err := s.connect("setup")
	if err != nil {
		return false, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return false, fmt.Errorf("jetstream: %w", err)
	}
	if err := buckets.Ensure(ctx, js, s.opts.Settings); err != nil {
		return false, err
	}
	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		return false, err
	}
	keys, err := store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).Keys(ctx)
	if err != nil {
		return false, err
	}
	_, err = store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return len(keys) == 0, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

func (s *System) startServices(ctx context.Context) error {
	settings, log := s.opts.Settings, s.log
	nc, err := s.connect(configurator.Component)
	if err != nil {
		return err
	}
	cfgr, err := configurator.New(configurator.Config{Conn: nc, Settings: settings, Log: log, Version: s.opts.Version, DeleteAfter: s.opts.RegistryDeleteAfter, GitCache: filepath.Join(s.opts.DataDir, "git"),
		Metrics: configurator.NewMetrics(s.metrics)})
	if err != nil {
		return err
	}
	s.run(ctx, configurator.Component, cfgr.Run)
	s.readies = append(s.readies, readier{configurator.Component, cfgr.Ready})

	if nc, err = s.connect(coordinator.Component); err != nil {
		return err
	}
	coord, err := coordinator.New(coordinator.Config{Conn: nc, Settings: settings, Log: log, Instance: "dev", Version: s.opts.Version,
		Metrics: coordinator.NewMetrics(s.metrics)})
	if err != nil {
		return err
	}
	s.run(ctx, coordinator.Component, coord.Run)
	s.readies = append(s.readies, readier{coordinator.Component, coord.Ready})

	if nc, err = s.connect(reaper.Component); err != nil {
		return err
	}
	rp, err := reaper.New(reaper.Config{Conn: nc, Settings: settings, Log: log, Version: s.opts.Version,
		Metrics: reaper.NewMetrics(s.metrics)})
	if err != nil {
		return err
	}
	s.run(ctx, reaper.Component, rp.Run)
	s.readies = append(s.readies, readier{reaper.Component, rp.Ready})
	return nil
}

// startAgents starts one agent per node, each on its own connection whose
// reconnects make the agent fetch its desired config again.
func (s *System) startAgents(ctx context.Context) error {
	agentMetrics := agent.NewMetrics(s.metrics) // every agent's applies and checks, together
	for i := range s.opts.Agents {
		node := NodeName(i, s.opts.Agents)
		dir := filepath.Join(s.opts.DataDir, "agents", node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("agent %s: %w", node, err)
		}
		nc, err := s.connectAs(node, creds.RoleNode, node)
		if err != nil {
			return err
		}
		checks := make([]agent.CheckSpec, len(s.opts.CheckCmds))
		for i, c := range s.opts.CheckCmds {
			checks[i] = agent.CheckSpec{Check: agent.ExecCheck{Command: c}}
		}
		a, err := agent.New(agent.Config{
			Conn: nc, Settings: s.opts.Settings, Log: s.log,
			Node: node, Labels: NodeLabels(i), StateDir: dir,
			Applier: agent.NewFileApplier(filepath.Join(dir, "config.json")),
			Checks:  checks,
			Version: s.opts.Version,
			Metrics: agentMetrics,
		})
		if err != nil {
			return err
		}
		nc.SetReconnectHandler(func(*nats.Conn) { a.Reconnected() })
		s.nodes = append(s.nodes, node)
		s.readies = append(s.readies, readier{"agent " + node, a.Ready})
		s.run(ctx, "agent "+node, a.Run)
	}
	return nil
}

// NodeName names the i-th (0-based) of n dev nodes: node-01 … node-99, and
// with more than 99 nodes node-001 ….
func NodeName(i, n int) string {
	width := max(2, len(strconv.Itoa(n)))
	return fmt.Sprintf("node-%0*d", width, i+1)
}

// NodeLabels spreads dev nodes over three zones and, within them, two racks,
// so that selectors and failure domains have something to choose from.
func NodeLabels(i int) map[string]string {
	return map[string]string{
		"zone": fmt.Sprintf("zone-%c", 'a'+i%3),
		"rack": fmt.Sprintf("rack-%d", 1+i/3%2),
	}
}
