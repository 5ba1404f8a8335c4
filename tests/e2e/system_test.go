package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// system is every sluice service and a fleet of agents running in this
// process against one embedded nats-server, as `sluice dev` runs them. Each
// service and agent can be stopped and started on its own.
type system struct {
	t      *testing.T
	env    *natstest.Env
	dir    string // agents' state directories live under it
	wrap   func(node string, a agent.Applier) agent.Applier
	checks []agent.CheckSpec // run by every agent after each apply
	// nodeChecks, if set, are a node's own checks, after checks.
	nodeChecks func(node string) []agent.CheckSpec
	labels     map[string]map[string]string
	// pairs, if set, gives a node a redundancy group (contract.LabelPair)
	// besides nodeLabels.
	pairs map[string]string
	// features, if set for a node, are the config features its agent reads
	// (agent.Config.Features): an empty list plays an agent of the
	// baseline release.
	features map[string][]string
	mu       sync.Mutex
	stops    map[string]func() // component or node → stop it and wait
}

// nodeLabels spreads nodes over three zones and two racks.
func nodeLabels(i int) map[string]string {
	return map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3), "rack": fmt.Sprintf("rack-%d", 1+i/3%2)}
}

func nodeName(i int) string { return fmt.Sprintf("node-%02d", i+1) }

// startSystem starts the services and n agents whose applier is wrap(node, file applier).
func startSystem(t *testing.T, env *natstest.Env, dir string, n int, wrap func(string, agent.Applier) agent.Applier, checks ...agent.CheckSpec) *system {
	t.Helper()
	return startSystemWith(t, env, dir, n, wrap, nil, checks...)
}

// startSystemWith is startSystem with each node's own checks too.
func startSystemWith(t *testing.T, env *natstest.Env, dir string, n int, wrap func(string, agent.Applier) agent.Applier,
	nodeChecks func(string) []agent.CheckSpec, checks ...agent.CheckSpec) *system {
	t.Helper()
	return (&system{t: t, env: env, dir: dir, wrap: wrap, checks: checks, nodeChecks: nodeChecks}).start(n)
}

// start starts the services and n agents of s.
func (s *system) start(n int) *system {
	t, env := s.t, s.env
	s.labels, s.stops = map[string]map[string]string{}, map[string]func(){}
	t.Cleanup(s.stop)
	log := zerolog.Nop()
	cfgr, err := configurator.New(configurator.Config{Conn: env.ConnectRole(t, creds.RoleConfigurator, ""), Settings: env.Settings, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	s.run("configurator", cfgr.Run)
	s.startCoordinator()
	rp, err := reaper.New(reaper.Config{Conn: env.ConnectRole(t, creds.RoleReaper, ""), Settings: env.Settings, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	s.run("reaper", rp.Run)
	for i := range n {
		s.startAgent(i)
	}
	return s
}

func (s *system) run(name string, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f(ctx); err != nil && ctx.Err() == nil {
			s.t.Errorf("%s stopped: %v", name, err)
		}
	}()
	s.mu.Lock()
	s.stops[name] = func() { cancel(); <-done }
	s.mu.Unlock()
}

// halt stops one component or agent and waits for it.
func (s *system) halt(name string) {
	s.mu.Lock()
	stop := s.stops[name]
	delete(s.stops, name)
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

func (s *system) startCoordinator() {
	coord, err := coordinator.New(coordinator.Config{Conn: s.env.ConnectRole(s.t, creds.RoleCoordinator, ""), Settings: s.env.Settings, Log: zerolog.Nop(),
		Instance: "e2e", SaveInterval: 20 * time.Millisecond, TickInterval: 100 * time.Millisecond})
	if err != nil {
		s.t.Fatal(err)
	}
	s.run("coordinator", coord.Run)
}

func (s *system) startAgent(i int) {
	name := nodeName(i)
	stateDir := filepath.Join(s.dir, name)
	var ap agent.Applier = agent.NewFileApplier(filepath.Join(stateDir, "config.json"))
	if s.wrap != nil {
		ap = s.wrap(name, ap)
	}
	labels := nodeLabels(i)
	if g := s.pairs[name]; g != "" {
		labels[contract.LabelPair] = g
	}
	s.mu.Lock()
	s.labels[name] = labels
	s.mu.Unlock()
	checks := s.checks
	if s.nodeChecks != nil {
		checks = append(slices.Clone(checks), s.nodeChecks(name)...)
	}
	nc := s.env.ConnectRole(s.t, creds.RoleNode, name)
	a, err := agent.New(agent.Config{Conn: nc, Settings: s.env.Settings, Log: zerolog.Nop(), Node: name,
		Labels: labels, StateDir: stateDir, Applier: ap, Version: "e2e", Checks: checks, Features: s.features[name]})
	if err != nil {
		s.t.Fatal(err)
	}
	nc.SetReconnectHandler(func(*nats.Conn) { a.Resync() }) // as the agent binary and sluice dev do
	s.run(name, a.Run)
}

func (s *system) stop() {
	s.mu.Lock()
	names := make([]string, 0, len(s.stops))
	for n := range s.stops {
		names = append(names, n)
	}
	s.mu.Unlock()
	for _, n := range names {
		s.halt(n)
	}
}

func applyExamples(t *testing.T, env *natstest.Env, maxParallel string) *sluicev1.ApplyResponse {
	t.Helper()
	intents, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	// Margin: WaitReady returns once the configurator serves, and an
	// apply takes milliseconds; 30s is for a cold start on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := apiclient.WaitReady(ctx, env.Conn); err != nil {
		t.Fatal(err)
	}
	resp, err := apiclient.Apply(ctx, env.Conn, &sluicev1.ApplyRequest{Intents: intents, Strategy: &sluicev1.Strategy{MaxParallel: maxParallel}, Source: "e2e"})
	if err != nil {
		t.Fatalf("apply examples: %v", err)
	}
	if !resp.GetChanged() {
		t.Fatalf("apply examples: nothing changed: %v", resp)
	}
	return resp
}

// Waits in this suite are polls that return as soon as their condition
// holds (natstest.Eventually, waitRegistered, waitRolloutEnd): their
// timeouts are margins, a minute or more against seconds of work, that a
// loaded 2-core machine cannot miss and a passing test never waits out.

func waitRegistered(t *testing.T, env *natstest.Env, n int) {
	t.Helper()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	natstest.Eventually(t, 60*time.Second, fmt.Sprintf("%d agents to register", n), func() bool {
		keys, err := nodes.Keys(context.Background())
		return err == nil && len(keys) == n
	})
}

// waitRolloutEnd waits for the rollout of head generation gen to end and returns it.
func waitRolloutEnd(t *testing.T, env *natstest.Env, gen uint64, timeout time.Duration) *sluicev1.Rollout {
	t.Helper()
	ctx := context.Background()
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	var got *sluicev1.Rollout
	natstest.Eventually(t, timeout, fmt.Sprintf("the rollout of generation %d to end", gen), func() bool {
		all, err := rollouts.List(ctx, ">")
		if err != nil {
			return false
		}
		for _, e := range all {
			if e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied {
				continue
			}
			phase := e.Value.GetPhase()
			if e.Value.GetGeneration() == gen && phase != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING &&
				phase != sluicev1.RolloutPhase_ROLLOUT_PHASE_REVERTING {
				got = e.Value
				return true
			}
		}
		return false
	})
	return got
}

// expectedFingerprints renders the head revision for every node, as the coordinator must.
func expectedFingerprints(t *testing.T, env *natstest.Env, revID string, labels map[string]map[string]string) map[string]string {
	t.Helper()
	rev, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Get(context.Background(), revID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for node, l := range labels {
		want[node] = render.Fingerprint(render.NodeConfig(rev.Value, l))
	}
	return want
}
