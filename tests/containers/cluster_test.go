//go:build containers

package containers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	mobynet "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/creds"
)

const (
	// leaderLease is the coordinators' --leader-lease, as docker-compose.yaml
	// has it: a standby takes over within about twice this.
	leaderLease = 10 * time.Second
	// httpPort is every sluice container's --http-addr port.
	httpPort = "9090/tcp"
	// agentStateDir is the agent image's state directory (its --state-dir).
	agentStateDir = "/var/lib/sluice-agent"
	// applySecondsFile holds how long each apply of an agent takes (the
	// applier below sleeps that long); a test writes it with docker exec.
	applySecondsFile = agentStateDir + "/apply-seconds"
	// startTimeout bounds a container's start, readiness included.
	startTimeout = 2 * time.Minute
)

// agentConfig is every agent's --config: the exec applier writes the config
// to config.json in the state directory, then sleeps for apply-seconds (1
// unless a test wrote another number), so a test can catch an agent in the
// middle of an apply; the check is docker-compose.yaml's.
const agentConfig = `applier:
  kind: exec
  mode: file
  path: ` + agentStateDir + `/config.json
  command: sleep "$(cat ` + applySecondsFile + ` 2>/dev/null || echo 1)"
checks:
  - name: config-written
    exec: test -s "$SLUICE_CONFIG"
`

// agents are the four nodes: two zones of two racks, one node per rack.
var agents = []struct{ node, zone, rack string }{
	{"node-01", "zone-a", "rack-a1"},
	{"node-02", "zone-a", "rack-a2"},
	{"node-03", "zone-b", "rack-b1"},
	{"node-04", "zone-b", "rack-b2"},
}

// natsNames are the three NATS servers; deploy/nats-cluster.conf routes to
// them by these names.
var natsNames = []string{"nats-1", "nats-2", "nats-3"}

// cluster is one sluice system on a private Docker network: three NATS
// servers, the configurator, two coordinators, the reaper and the agents,
// each in its own container named by its role (nats-1, coordinator-2,
// node-03, …), and a client connected from the host to every server.
type cluster struct {
	t       *testing.T
	prefix  string // container names: prefix + role
	docker  *testcontainers.DockerClient
	network *testcontainers.DockerNetwork

	mu    sync.Mutex
	ctrs  map[string]*testcontainers.DockerContainer
	roles []string        // in start order
	off   map[string]bool // agents disconnected from the network

	natsURLs []string // nats://127.0.0.1:<port> of each server, as published
	sec      *secrets // with SLUICE_TEST_SECURE=1: credentials and TLS (secure_test.go)
	nc       *nats.Conn
	js       jetstream.JetStream
	b        *buckets.Set
}

// image is the locally built image of binary bin.
func image(bin string) string {
	prefix, tag := os.Getenv("SLUICE_IMAGE_PREFIX"), os.Getenv("SLUICE_IMAGE_TAG")
	if prefix == "" {
		prefix = "sluice"
	}
	if tag == "" {
		tag = "dev"
	}
	return prefix + "/" + bin + ":" + tag
}

// startCluster starts the whole system and waits until every container is
// ready and the host's client has bound every bucket. Everything it makes
// is removed when t ends; when t failed, every container's log is written
// out first (see dumpLogs).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := &cluster{t: t, prefix: fmt.Sprintf("sluice-ct-%d-", time.Now().UnixNano()%1e6),
		ctrs: map[string]*testcontainers.DockerContainer{}, off: map[string]bool{}, sec: secureFromEnv(t)}
	t.Cleanup(c.cleanup)
	began := time.Now()

	docker, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker: %v", err)
	}
	c.docker = docker
	// Nothing can be pulled here: a missing image would make testcontainers
	// try, and fail slowly.
	for _, bin := range []string{"nats-server", "sluice-configurator", "sluice-rollout-coordinator", "sluice-reaper", "sluice-agent"} {
		if _, err := docker.ImageInspect(ctx, image(bin)); err != nil {
			t.Fatalf("image %s: %v: build it with make images (IMAGE_TAG=… to match SLUICE_IMAGE_TAG)", image(bin), err)
		}
	}
	nw, err := tcnetwork.New(ctx, tcnetwork.WithLabels(map[string]string{"sluice.test": "containers"}))
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	c.network = nw

	// The NATS servers' client ports are fixed host ports, so that a server
	// started again after a kill is where the host's client expects it.
	ports := freePorts(t, len(natsNames))
	specs := make([]spec, 0, len(natsNames))
	for i, name := range natsNames {
		c.natsURLs = append(c.natsURLs, "nats://127.0.0.1:"+ports[i])
		specs = append(specs, natsSpec(name, ports[i]))
		if c.sec != nil {
			c.sec.natsServer(&specs[i])
		}
	}
	// A server is healthy only once the cluster has a JetStream meta leader,
	// so the three start together.
	c.startAll(ctx, specs)

	specs = specs[:0]
	users := []struct{ role, node string }{}
	add := func(sp spec, role, node string) {
		specs, users = append(specs, sp), append(users, struct{ role, node string }{role, node})
	}
	add(serviceSpec("configurator", "sluice-configurator"), creds.RoleConfigurator, "")
	for _, name := range []string{"coordinator-1", "coordinator-2"} {
		add(serviceSpec(name, "sluice-rollout-coordinator", "--leader-lease", leaderLease.String(), "--instance", name), creds.RoleCoordinator, "")
	}
	add(serviceSpec("reaper", "sluice-reaper"), creds.RoleReaper, "")
	for _, a := range agents {
		add(agentSpec(a.node, a.zone, a.rack), creds.RoleNode, a.node)
	}
	if c.sec != nil {
		for i, u := range users {
			c.sec.client(t, &specs[i], u.role, u.node)
		}
	}
	c.startAll(ctx, specs)

	opts := []nats.Option{nats.Name("sluice container tests"), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if c.sec != nil {
		opts = append(opts, c.sec.hostOptions(t)...)
	}
	c.nc, err = nats.Connect(strings.Join(c.natsURLs, ","), opts...)
	if err != nil {
		t.Fatalf("connect to %v: %v", c.natsURLs, err)
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		t.Fatal(err)
	}
	if c.b, err = buckets.BindAll(ctx, c.js); err != nil {
		t.Fatalf("bind the buckets from the host: %v", err)
	}
	secured := ""
	if c.sec != nil {
		secured = " (operator mode, TLS: each a user of its own role)"
	}
	t.Logf("cluster up in %s%s: %s", time.Since(began).Round(100*time.Millisecond), secured, strings.Join(c.roles, " "))
	return c
}

// spec is one container to start.
type spec struct {
	role  string // its name on the network and its hostname
	bin   string // the image's binary
	cmd   []string
	env   map[string]string
	files []testcontainers.ContainerFile
	ports map[string]string // container port → host port on 127.0.0.1 ("" any)
	ready wait.Strategy
}

// readyz waits for a sluice container's /readyz to answer 200.
func readyz() wait.Strategy {
	return wait.ForHTTP("/readyz").WithPort(httpPort).WithForcedIPv4LocalHost().
		WithPollInterval(250 * time.Millisecond).WithStartupTimeout(startTimeout)
}

func natsSpec(name, clientPort string) spec {
	root := filepath.Join("..", "..", "deploy")
	return spec{
		role: name, bin: "nats-server",
		cmd: []string{"-c", "/etc/nats/nats-cluster.conf"},
		env: map[string]string{"NATS_SERVER_NAME": name},
		files: []testcontainers.ContainerFile{
			{HostFilePath: filepath.Join(root, "nats-server.conf"), ContainerFilePath: "/etc/nats/nats-server.conf", FileMode: 0o644},
			{HostFilePath: filepath.Join(root, "nats-cluster.conf"), ContainerFilePath: "/etc/nats/nats-cluster.conf", FileMode: 0o644},
		},
		ports: map[string]string{"4222/tcp": clientPort, "8222/tcp": ""},
		// 200 once the server runs and is current with the cluster's
		// JetStream (a meta leader, its streams caught up).
		ready: wait.ForHTTP("/healthz").WithPort("8222/tcp").WithForcedIPv4LocalHost().
			WithPollInterval(250 * time.Millisecond).WithStartupTimeout(startTimeout),
	}
}

// serviceEnv is docker-compose.yaml's (every server's URL, R3 buckets) and
// a node lease of nodeLease, shorter than the default's 3 minutes so that a
// node cut off past its lease is skipped within the test's time.
func serviceEnv() map[string]string {
	urls := make([]string, len(natsNames))
	for i, n := range natsNames {
		urls[i] = "nats://" + n + ":4222"
	}
	return map[string]string{"SLUICE_NATS_URL": strings.Join(urls, ","), "SLUICE_REPLICAS": "3", "SLUICE_NODE_LEASE": nodeLease.String()}
}

func serviceSpec(role, bin string, args ...string) spec {
	return spec{role: role, bin: bin, cmd: append([]string{"--http-addr", ":9090"}, args...),
		env: serviceEnv(), ports: map[string]string{httpPort: ""}, ready: readyz()}
}

func agentSpec(node, zone, rack string) spec {
	return spec{
		role: node, bin: "sluice-agent",
		cmd: []string{"--http-addr", ":9090", "--config", "/etc/sluice-agent/config.yaml",
			"--node", node, "--labels", "zone=" + zone + ",rack=" + rack},
		env:   serviceEnv(),
		files: []testcontainers.ContainerFile{{Reader: strings.NewReader(agentConfig), ContainerFilePath: "/etc/sluice-agent/config.yaml", FileMode: 0o644}},
		ports: map[string]string{httpPort: ""},
		ready: readyz(),
	}
}

// startAll starts the containers concurrently and waits until all are ready.
func (c *cluster) startAll(ctx context.Context, specs []spec) {
	c.t.Helper()
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Go(func() { errs[i] = c.run(ctx, s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
}

// run creates, starts and waits for one container.
func (c *cluster) run(ctx context.Context, s spec) error {
	bindings := mobynet.PortMap{}
	exposed := make([]string, 0, len(s.ports))
	for p, host := range s.ports {
		exposed = append(exposed, p)
		bindings[mobynet.MustParsePort(p)] = []mobynet.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: host}}
	}
	ctr, err := testcontainers.Run(ctx, image(s.bin),
		testcontainers.WithName(c.prefix+s.role),
		tcnetwork.WithNetwork([]string{s.role}, c.network),
		testcontainers.WithConfigModifier(func(cfg *container.Config) { cfg.Hostname = s.role }),
		testcontainers.WithCmd(s.cmd...),
		testcontainers.WithEnv(s.env),
		testcontainers.WithFiles(s.files...),
		testcontainers.WithExposedPorts(exposed...),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.PortBindings = bindings }),
		testcontainers.WithWaitStrategyAndDeadline(startTimeout, s.ready),
		testcontainers.WithLabels(map[string]string{"sluice.test": "containers", "sluice.test.role": s.role}),
	)
	if ctr != nil { // made, maybe not ready: removed at the end all the same
		c.mu.Lock()
		c.ctrs[s.role] = ctr
		c.roles = append(c.roles, s.role)
		c.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("start %s (%s): %w", s.role, image(s.bin), err)
	}
	return nil
}

// ctr is the container of role; there is one for every role startCluster
// started (a missing one is a mistake in the test).
func (c *cluster) ctr(role string) *testcontainers.DockerContainer {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctr := c.ctrs[role]
	if ctr == nil {
		panic("containers: no container " + role)
	}
	return ctr
}

// kill sends SIGKILL to role's container, as `docker kill` does, and waits
// until it is no longer running.
func (c *cluster) kill(t *testing.T, role string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctr := c.ctr(role)
	if _, err := c.docker.ContainerKill(ctx, ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatalf("kill %s: %v", role, err)
	}
	eventually(t, 30*time.Second, role+" to stop", func() bool {
		st, err := ctr.State(ctx)
		return err == nil && !st.Running
	})
}

// stop stops role's container as `docker stop` does: SIGTERM, then SIGKILL
// after grace.
func (c *cluster) stop(t *testing.T, role string, grace time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	if err := c.ctr(role).Stop(ctx, &grace); err != nil {
		t.Fatalf("stop %s: %v", role, err)
	}
}

// start starts role's stopped container again and waits until it is ready.
func (c *cluster) start(t *testing.T, role string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout+30*time.Second)
	defer cancel()
	if err := c.ctr(role).Start(ctx); err != nil {
		t.Fatalf("start %s again: %v", role, err)
	}
}

// disconnect takes role's container off the cluster's network (`docker
// network disconnect`): its connections stall as behind a cut cable.
func (c *cluster) disconnect(t *testing.T, role string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.docker.NetworkDisconnect(ctx, c.network.ID, client.NetworkDisconnectOptions{Container: c.ctr(role).GetContainerID()}); err != nil {
		t.Fatalf("disconnect %s: %v", role, err)
	}
	c.mu.Lock()
	c.off[role] = true
	c.mu.Unlock()
}

// connect puts role's container back on the network under its name. Docker
// gives it the address it had while nothing else took it, so its TCP
// connections carry on, as after a cable is plugged back in.
func (c *cluster) connect(t *testing.T, role string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.docker.NetworkConnect(ctx, c.network.ID, client.NetworkConnectOptions{Container: c.ctr(role).GetContainerID(),
		EndpointConfig: &mobynet.EndpointSettings{Aliases: []string{role}}}); err != nil {
		t.Fatalf("connect %s: %v", role, err)
	}
	c.mu.Lock()
	delete(c.off, role)
	c.mu.Unlock()
}

// heal puts back whatever an earlier scenario left down — a stopped
// container, a disconnected agent — so that every scenario starts from the
// whole system, ready.
func (c *cluster) heal(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	off := make([]string, 0, len(c.off))
	for role := range c.off {
		off = append(off, role)
	}
	roles := append([]string(nil), c.roles...)
	c.mu.Unlock()
	for _, role := range off {
		t.Logf("heal: connecting %s again", role)
		c.connect(t, role)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, role := range roles {
		st, err := c.ctr(role).State(ctx)
		if err != nil {
			t.Fatalf("state of %s: %v", role, err)
		}
		if !st.Running {
			t.Logf("heal: starting %s again", role)
			c.start(t, role)
		}
	}
}

// exec runs cmd in role's container and returns its output; a non-zero exit
// fails t.
func (c *cluster) exec(t *testing.T, role string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, r, err := c.ctr(role).Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		t.Fatalf("exec %v in %s: %v", cmd, role, err)
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		t.Fatalf("exec %v in %s: exit %d: %s", cmd, role, code, out)
	}
	return string(out)
}

// setApplySeconds makes each later apply of node's agent take n seconds.
func (c *cluster) setApplySeconds(t *testing.T, node string, n int) {
	t.Helper()
	c.exec(t, node, "sh", "-c", fmt.Sprintf("echo %d > %s", n, applySecondsFile))
}

// readFile returns a file of role's container, read through the Docker API
// (so it works on a container with no tools, and on a stopped one).
func (c *cluster) readFile(ctx context.Context, role, path string) ([]byte, error) {
	rc, err := c.ctr(role).CopyFileFromContainer(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// readyLine GETs role's /readyz and returns its one line.
func (c *cluster) readyLine(ctx context.Context, role string) (string, error) {
	port, err := c.ctr(role).MappedPort(ctx, httpPort)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", port.Num()), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// monitorURL is the base URL of NATS server name's published monitoring port.
func (c *cluster) monitorURL(ctx context.Context, name string) (string, error) {
	port, err := c.ctr(name).MappedPort(ctx, "8222/tcp")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port.Num()), nil
}

// cleanup writes out every container's log when the test failed, then
// removes the containers and the network.
func (c *cluster) cleanup() {
	if c.sec != nil {
		for _, line := range c.refusals() {
			c.t.Errorf("the server refused a permission: %s", line)
		}
	}
	if c.t.Failed() {
		c.dumpLogs()
	}
	if c.nc != nil {
		c.nc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.mu.Lock()
	roles := append([]string(nil), c.roles...)
	c.mu.Unlock()
	var errs []error
	for i := len(roles) - 1; i >= 0; i-- {
		if err := c.ctrs[roles[i]].Terminate(ctx, testcontainers.StopTimeout(0)); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", roles[i], err))
		}
	}
	if c.network != nil {
		if err := c.network.Remove(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove network %s: %w", c.network.Name, err))
		}
	}
	if c.docker != nil {
		_ = c.docker.Close()
	}
	if err := errors.Join(errs...); err != nil {
		c.t.Errorf("cleanup: %v (docker ps -a --filter label=sluice.test=containers)", err)
	}
}

// logTail is how many lines of each container's log a failed test prints;
// the whole logs are written to files.
const logTail = 30

// dumpLogs writes every container's log to SLUICE_CONTAINER_LOGS (default
// bin/container-logs)/<test>/<role>.log and prints the end of each.
func (c *cluster) dumpLogs() {
	dir := os.Getenv("SLUICE_CONTAINER_LOGS")
	if dir == "" {
		dir = filepath.Join("..", "..", "bin", "container-logs")
	}
	dir = filepath.Join(dir, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(c.t.Name(), "_")+"-"+time.Now().Format("150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Logf("container logs: %v", err)
		return
	}
	abs, _ := filepath.Abs(dir)
	c.eachLog(func(role string, b []byte, err error) {
		if err != nil {
			c.t.Logf("logs of %s: %v", role, err)
			return
		}
		if err := os.WriteFile(filepath.Join(dir, role+".log"), b, 0o644); err != nil {
			c.t.Logf("logs of %s: %v", role, err)
		}
		var lines []string
		for s := bufio.NewScanner(strings.NewReader(string(b))); s.Scan(); {
			lines = append(lines, s.Text())
		}
		lines = lines[max(0, len(lines)-logTail):]
		c.t.Logf("--- %s: last %d lines (all in %s)\n%s", role, len(lines), filepath.Join(abs, role+".log"), strings.Join(lines, "\n"))
	})
}

// eachLog reads the whole log of every container, in start order, and
// hands it to each (or the error reading it).
func (c *cluster) eachLog(each func(role string, log []byte, err error)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.mu.Lock()
	roles := append([]string(nil), c.roles...)
	c.mu.Unlock()
	for _, role := range roles {
		rc, err := c.ctrs[role].Logs(ctx)
		if err != nil {
			each(role, nil, err)
			continue
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		each(role, b, err)
	}
}

// freePorts returns n ports free on 127.0.0.1 now.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, p, _ := net.SplitHostPort(l.Addr().String())
		ports = append(ports, p)
	}
	return ports
}

// eventually polls cond every 200ms until it holds, failing t after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll(t, 200*time.Millisecond, timeout, what, cond)
}

// poll calls cond every interval until it holds, failing t after timeout.
func poll(t *testing.T, interval, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
