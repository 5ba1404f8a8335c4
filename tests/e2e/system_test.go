package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// system is every sluice service and a fleet of agents running in this
// process against one embedded nats-server, as `sluice dev` runs them.
type system struct {
	env    *natstest.Env
	dir    string // agents' state directories live under it
	labels map[string]map[string]string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// nodeLabels spreads nodes over three zones and two racks.
func nodeLabels(i int) map[string]string {
	return map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3), "rack": fmt.Sprintf("rack-%d", 1+i/3%2)}
}

func nodeName(i int) string { return fmt.Sprintf("node-%02d", i+1) }

// startSystem starts the services and n agents whose applier is wrap(file applier).
func startSystem(t *testing.T, env *natstest.Env, dir string, n int, wrap func(agent.Applier) agent.Applier) *system {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &system{env: env, dir: dir, labels: map[string]map[string]string{}, cancel: cancel}
	t.Cleanup(s.stop)
	log := zerolog.Nop()
	run := func(name string, f func(context.Context) error) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s stopped: %v", name, err)
			}
		}()
	}
	cfgr, err := configurator.New(configurator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	run("configurator", cfgr.Run)
	coord, err := coordinator.New(coordinator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: log, Instance: "e2e", SaveInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run("coordinator", coord.Run)
	rp, err := reaper.New(reaper.Config{Conn: env.Connect(t), Settings: env.Settings, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	run("reaper", rp.Run)
	agentConn := env.Connect(t)
	for i := range n {
		name := nodeName(i)
		stateDir := filepath.Join(dir, name)
		var ap agent.Applier = agent.NewFileApplier(filepath.Join(stateDir, "config.json"))
		if wrap != nil {
			ap = wrap(ap)
		}
		s.labels[name] = nodeLabels(i)
		a, err := agent.New(agent.Config{Conn: agentConn, Settings: env.Settings, Log: log, Node: name,
			Labels: nodeLabels(i), StateDir: stateDir, Applier: ap, Version: "e2e"})
		if err != nil {
			t.Fatal(err)
		}
		run(name, a.Run)
	}
	return s
}

func (s *system) stop() {
	s.cancel()
	s.wg.Wait()
}

func applyExamples(t *testing.T, env *natstest.Env, maxParallel string) *sluicev1.ApplyResponse {
	t.Helper()
	intents, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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

func waitRegistered(t *testing.T, env *natstest.Env, n int) {
	t.Helper()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	natstest.Eventually(t, 20*time.Second, fmt.Sprintf("%d agents to register", n), func() bool {
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
			if e.Value.GetGeneration() == gen && e.Value.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING {
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
