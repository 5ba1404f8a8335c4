package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/cmdutil"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
	coordinator "github.com/sluicehq/sluice/services/rollout-coordinator"
)

// process is one service run as its binary runs it (cmdutil.Common.Start:
// its own connection, registry and /healthz, /readyz, /metrics on a
// loopback port), in this process.
type process struct {
	name string
	base string // http://127.0.0.1:port
	stop func()
}

// serviceUnderTest is what the binaries run.
type serviceUnderTest interface {
	Run(ctx context.Context) error
	Ready() (bool, string)
}

func startProcess(t *testing.T, env *natstest.Env, name, role, node string, build func(p *cmdutil.Process) (serviceUnderTest, error)) *process {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := cmdutil.Common{Server: env.URL, HTTPAddr: addr}
	c.Auth.Creds = env.CredsFile(t, role, node) // with natstest.EnvSecure
	if node != "" {
		c.InboxPrefix = creds.NodeInboxPrefix(node)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := c.Start(ctx, name, zerolog.Nop())
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	svc, err := build(p)
	if err != nil {
		t.Fatal(err)
	}
	p.SetReadiness(svc.Ready)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("%s stopped: %v", name, err)
		}
	}()
	pr := &process{name: name, base: "http://" + addr, stop: func() { cancel(); <-done; p.Close() }}
	t.Cleanup(pr.stop)
	return pr
}

func (p *process) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second} // margin: a loopback answer, milliseconds unloaded
	resp, err := c.Get(p.base + path)
	if err != nil {
		t.Fatalf("%s %s: %v", p.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sample is the value of the sample of metric whose labels are exactly
// labels (`{a="x",b="y"}`, sorted as Prometheus writes them; "" for none),
// and whether there is one.
func sample(metrics, metric, labels string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric+labels) + ` (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// Every service as its binary runs it: ready once it is, and after a small
// rollout from a directory registry its metrics say what happened.
func TestHealth_EveryServiceIsReadyAndItsMetricsTellTheRollout(t *testing.T) {
	s := contract.DefaultSettings()
	s.NodeLease = 2 * time.Second // a stopped agent's presence expires soon, for the reaper
	env := natstest.Start(t, s)
	dir := t.TempDir()
	check := agent.CheckSpec{Check: agent.ExecCheck{Label: "link", Command: "true"}}

	cfgr := startProcess(t, env, "sluice-configurator", creds.RoleConfigurator, "", func(p *cmdutil.Process) (serviceUnderTest, error) {
		return configurator.New(configurator.Config{Conn: p.Conn, Settings: s, Log: zerolog.Nop(), Metrics: configurator.NewMetrics(p.Registry)})
	})
	coord := startProcess(t, env, "sluice-rollout-coordinator", creds.RoleCoordinator, "", func(p *cmdutil.Process) (serviceUnderTest, error) {
		return coordinator.New(coordinator.Config{Conn: p.Conn, Settings: s, Log: zerolog.Nop(), Instance: "coord-a",
			SaveInterval: 20 * time.Millisecond, TickInterval: 100 * time.Millisecond, Metrics: coordinator.NewMetrics(p.Registry)})
	})
	rp := startProcess(t, env, "sluice-reaper", creds.RoleReaper, "", func(p *cmdutil.Process) (serviceUnderTest, error) {
		return reaper.New(reaper.Config{Conn: p.Conn, Settings: s, Log: zerolog.Nop(), Grace: time.Second, Interval: 300 * time.Millisecond,
			Metrics: reaper.NewMetrics(p.Registry)})
	})
	var agents []*process
	for i := range 3 {
		name := nodeName(i)
		agents = append(agents, startProcess(t, env, "sluice-agent "+name, creds.RoleNode, name, func(p *cmdutil.Process) (serviceUnderTest, error) {
			return agent.New(agent.Config{Conn: p.Conn, Settings: s, Log: zerolog.Nop(), Node: name, Labels: nodeLabels(i),
				StateDir: filepath.Join(dir, name), Applier: agent.NewFileApplier(filepath.Join(dir, name, "config.json")),
				Checks: []agent.CheckSpec{check}, Metrics: agent.NewMetrics(p.Registry)})
		}))
	}
	waitRegistered(t, env, 3)

	for _, tc := range []struct {
		p    *process
		want string
	}{
		{cfgr, "ready: serving the API\n"},
		{coord, "ready: leading term "},
		{rp, "ready: buckets bound; a pass every 300ms\n"},
		{agents[0], "ready: buckets bound; node node-01\n"},
	} {
		natstest.Eventually(t, 60*time.Second, tc.p.name+" to be ready", func() bool {
			code, body := tc.p.get(t, "/readyz")
			return code == http.StatusOK && strings.HasPrefix(body, tc.want)
		})
		if code, _ := tc.p.get(t, "/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz: %d", tc.p.name, code)
		}
	}

	// A directory registry with two networks: synced, and rolled out.
	regDir := t.TempDir()
	for i, n := range []string{"red", "green"} {
		if err := os.WriteFile(filepath.Join(regDir, n+".yaml"), []byte(netDoc(n, 100+i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	specs := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	if _, err := specs.Create(context.Background(), contract.RegistryKey("gitops"), &sluicev1.RegistrySpec{Name: "gitops",
		SyncInterval: durationpb.New(time.Second), Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: regDir}}}); err != nil {
		t.Fatal(err)
	}
	var head *sluicev1.Head
	natstest.Eventually(t, 60*time.Second, "the registry's networks to be the head", func() bool {
		head = headOf(t, env)
		return head != nil
	})
	r := waitRolloutEnd(t, env, head.GetGeneration(), 60*time.Second)
	if r.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("rollout %s: %s", r.GetPhase(), r.GetReason())
	}

	rl := fmt.Sprintf(`{rollout=%q,`, r.GetId())
	want := []struct {
		p              *process
		metric, labels string
		ok             func(float64) bool
		what           string
	}{
		{coord, "sluice_coordinator_is_leader", "", eq(1), "1"},
		{coord, "sluice_coordinator_term", "", func(v float64) bool { return v >= 1 }, "the term, at least 1"},
		{coord, "sluice_rollout_phase", `{phase="succeeded",rollout="` + r.GetId() + `"}`, eq(1), "1"},
		{coord, "sluice_rollout_phase", `{phase="progressing",rollout="` + r.GetId() + `"}`, eq(0), "0"},
		{coord, "sluice_rollout_nodes", rl[:len(rl)-1] + `,state="provisioned"}`, eq(3), "3"},
		{coord, "sluice_rollout_nodes", rl[:len(rl)-1] + `,state="total"}`, eq(3), "3"},
		{coord, "sluice_rollout_nodes", rl[:len(rl)-1] + `,state="failed"}`, eq(0), "0"},
		{coord, "sluice_nodes", `{phase="provisioned"}`, eq(3), "3"},
		{coord, "sluice_nodes", `{phase="invalid"}`, eq(0), "0"},
		{agents[1], "sluice_agent_apply_seconds_count", `{result="ok"}`, eq(1), "1"},
		{agents[1], "sluice_agent_check_seconds_count", `{check="link",result="pass"}`, eq(1), "1"},
		{agents[1], "sluice_agent_apply_seconds_sum", `{result="ok"}`, func(v float64) bool { return v > 0 && v < 10 }, "a plausible duration"},
		{cfgr, "sluice_registry_state", `{registry="gitops",state="synced"}`, eq(1), "1"},
		{cfgr, "sluice_registry_state", `{registry="gitops",state="unreachable"}`, eq(0), "0"},
		{cfgr, "sluice_registry_consecutive_failures", `{registry="gitops"}`, eq(0), "0"},
		{cfgr, "sluice_registry_last_sync_timestamp_seconds", `{registry="gitops"}`, func(v float64) bool {
			return time.Since(time.Unix(int64(v), 0)) < time.Minute
		}, "within the last minute"},
		{rp, "sluice_reaper_deletions_total", `{kind="nodes"}`, eq(0), "0"},
		{cfgr, "sluice_nats_connected", "", eq(1), "1"},
		{cfgr, "sluice_build_info", `{version="dev"}`, eq(1), "1"},
	}
	for _, w := range want {
		_, metrics := w.p.get(t, "/metrics")
		v, ok := sample(metrics, w.metric, w.labels)
		if !ok || !w.ok(v) {
			t.Errorf("%s: %s%s = %v (present %v), want %s", w.p.name, w.metric, w.labels, v, ok, w.what)
		}
	}

	// An agent stops for good: its presence expires, the reaper deletes its keys.
	agents[2].stop()
	natstest.Eventually(t, 60*time.Second, "the reaper to count the departed node", func() bool {
		_, metrics := rp.get(t, "/metrics")
		v, _ := sample(metrics, "sluice_reaper_deletions_total", `{kind="nodes"}`)
		return v == 1
	})
	natstest.Eventually(t, 60*time.Second, "the coordinator to stop counting its status", func() bool {
		_, metrics := coord.get(t, "/metrics")
		v, _ := sample(metrics, "sluice_nodes", `{phase="provisioned"}`)
		return v == 2
	})
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
