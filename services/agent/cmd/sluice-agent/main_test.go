package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// desired is node's desired config: the empty config, fingerprinted as the
// coordinator does.
func desired(node string) *sluicev1.DesiredConfig {
	nc := &sluicev1.NodeConfig{}
	return &sluicev1.DesiredConfig{Node: node, Config: nc, Fingerprint: render.Fingerprint(nc)}
}

func TestRun_RegistersAndWritesConfigFile(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--server", env.URL, "--node", "n1", "--labels", "zone=a,rack=r1", "--state-dir", dir, "--log-level", "warn"}, &stderr)
	}()

	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	natstest.Eventually(t, 10*time.Second, "presence with labels", func() bool {
		e, err := nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["rack"] == "r1" && e.Value.GetAgentVersion() == version
	})
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := configs.Create(context.Background(), contract.DesiredKey("n1"), desired("n1")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, "config.json in the state dir", func() bool {
		_, err := os.Stat(filepath.Join(dir, "config.json"))
		return err == nil
	})
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", c, stderr.String())
	}
}

func TestParseLabels(t *testing.T) {
	tests := []struct {
		name    string
		given   string
		want    map[string]string
		wantErr bool
	}{
		{name: "empty", given: "", want: map[string]string{}},
		{name: "pairs", given: "zone=a, rack=r1", want: map[string]string{"zone": "a", "rack": "r1"}},
		{name: "empty value", given: "spare=", want: map[string]string{"spare": ""}},
		{name: "no equals", given: "zone", wantErr: true},
		{name: "no key", given: "=a", wantErr: true},
		{name: "duplicate", given: "zone=a,zone=b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLabels(tt.given)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRun_RejectsBadSettings_NamingTheField(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name    string
		given   []string
		wantErr string
	}{
		{name: "unknown applier", given: []string{"--applier", "netlink"}, wantErr: `--applier (applier.kind) "netlink"`},
		{name: "exec applier without a command", given: []string{"--applier", "exec"}, wantErr: "--apply-cmd (applier.command): required"},
		{name: "bad apply mode", given: []string{"--applier", "exec", "--apply-cmd", "true", "--apply-mode", "pipe"}, wantErr: `--apply-mode (applier.mode) "pipe"`},
		{name: "negative retries", given: []string{"--check-retries", "-1"}, wantErr: "--check-retries"},
		{name: "bad http status", given: []string{"--check-http", "http://x/=999"}, wantErr: "--check-http http://x/=999: status 999"},
		{name: "missing config file", given: []string{"--config", filepath.Join(dir, "none.yaml")}, wantErr: "--config"},
		{name: "unknown field", given: []string{"--config", file("unknown.yaml", "chekcs: []\n")}, wantErr: "chekcs"},
		{name: "check with two kinds", given: []string{"--config", file("two.yaml", "checks:\n- exec: 'true'\n- tcp: a:1\n  interface: lo\n")},
			wantErr: "checks[1]: set exactly one of exec, tcp, http, interface"},
		{name: "check with no kind", given: []string{"--config", file("none.yaml", "checks:\n- name: uplink\n")},
			wantErr: `checks[0]: check "uplink": set exactly one of exec, tcp, http, interface`},
		{name: "option of another kind", given: []string{"--config", file("opt.yaml", "checks:\n- {name: gw, exec: 'true', refusedIsReachable: true}\n")},
			wantErr: `checks[0]: check "gw": refusedIsReachable: only for a tcp check`},
		{name: "tcp address without port", given: []string{"--config", file("tcp.yaml", "checks:\n- {name: gw, tcp: 10.0.0.1}\n")},
			wantErr: `checks[0]: check "gw": tcp address "10.0.0.1" is not host:port`},
		{name: "http url without scheme", given: []string{"--config", file("url.yaml", "checks:\n- {http: 'localhost/healthz'}\n")},
			wantErr: `checks[0]: check "http: localhost/healthz": http url "localhost/healthz": want http://host/path`},
		{name: "bad duration", given: []string{"--config", file("dur.yaml", "checks:\n- exec: 'true'\n  timeout: soon\n")}, wantErr: "soon"},
		{name: "negative check retries", given: []string{"--config", file("neg.yaml", "checks:\n- exec: 'true'\n  retries: -2\n")}, wantErr: "checks[0]: retries: -2 is negative"},
		{name: "negative default retries", given: []string{"--config", file("negdef.yaml", "checkRetries: -1\n")}, wantErr: "checkRetries: -1 is negative"},
		{name: "bad tcp flag", given: []string{"--check-tcp", "gateway"}, wantErr: `--check-tcp gateway: check "tcp: gateway": tcp address "gateway" is not host:port`},
		{name: "empty check-cmd", given: []string{"--check-cmd", ""}, wantErr: "--check-cmd: empty value"},
		{name: "zero check timeout", given: []string{"--check-timeout", "0s"}, wantErr: "--check-timeout and --check-deadline must be positive"},
		{name: "missing credentials file", given: []string{"--creds", filepath.Join(dir, "none.creds")},
			wantErr: "--creds " + filepath.Join(dir, "none.creds") + ": stat"},
		{name: "missing credentials file named in the config file", given: []string{"--config", file("creds.yaml", "nats:\n  creds: /nonexistent/n1.creds\n")},
			wantErr: "--creds /nonexistent/n1.creds: stat /nonexistent/n1.creds: no such file or directory"},
		{name: "credentials file without a JWT", given: []string{"--creds", file("bad.creds", "hello\n")}, wantErr: "no user JWT in it"},
		{name: "unknown field under nats", given: []string{"--config", file("natsx.yaml", "nats:\n  cred: /x\n")}, wantErr: "cred"},
		{name: "user without a password file", given: []string{"--nats-user", "sluice"}, wantErr: "--nats-user sluice needs --nats-password-file"},
		{name: "empty password file", given: []string{"--nats-user", "sluice", "--nats-password-file", file("pw", "\n")}, wantErr: "the file is empty"},
		{name: "client certificate without its key", given: []string{"--tls-cert", file("c.pem", "x")}, wantErr: "--tls-cert and --tls-key go together"},
		{name: "CA file without a certificate", given: []string{"--tls-ca", file("ca.pem", "x")}, wantErr: "no PEM certificate in it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if c := run(context.Background(), append([]string{"--node", "n1"}, tt.given...), &stderr); c != 2 {
				t.Fatalf("exit code %d, want 2; stderr:\n%s", c, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Fatalf("stderr %q does not contain %q", stderr.String(), tt.wantErr)
			}
		})
	}
}

// agentConfigOf parses args as the command line and builds the agent's config.
func agentConfigOf(t *testing.T, args ...string) (agent.Config, error) {
	t.Helper()
	var o options
	fs := o.flagSet(io.Discard)
	if err := fs.Parse(append([]string{"--node", "n1", "--state-dir", "/state"}, args...)); err != nil {
		t.Fatal(err)
	}
	return o.agentConfig(fs)
}

func TestAgentConfig_FromFileAndFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	body := `applier: {kind: exec, command: "ip -batch -", mode: file, path: /run/net.json}
validate: "test -s $SLUICE_CONFIG"
checkTimeout: 7s
checkRetries: 1
checkDeadline: 90s
checks:
- {name: uplink, exec: "ping -c1 10.0.0.1", timeout: 5s, retries: 2}
- {tcp: "10.0.0.1:179", refusedIsReachable: true}
- {http: "http://127.0.0.1:8080/healthz", expectStatus: 204, retries: 0}
- {interface: vxlan100}
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		given        []string
		wantApplier  agent.Applier
		wantValidate string
		wantDeadline time.Duration
		wantChecks   []agent.CheckSpec
	}{
		{
			name:         "defaults: file applier in the state dir, no checks",
			wantApplier:  agent.NewFileApplier("/state/config.json"),
			wantDeadline: agent.DefaultCheckDeadline,
		},
		{
			name:         "the file",
			given:        []string{"--config", p},
			wantApplier:  agent.ExecApplier{Command: "ip -batch -", Mode: agent.ApplyModeFile, Path: "/run/net.json"},
			wantValidate: "test -s $SLUICE_CONFIG",
			wantDeadline: 90 * time.Second,
			wantChecks: []agent.CheckSpec{
				{Check: agent.ExecCheck{Label: "uplink", Command: "ping -c1 10.0.0.1"}, Timeout: 5 * time.Second, Retries: 2},
				{Check: agent.TCPCheck{Addr: "10.0.0.1:179", RefusedIsReachable: true}, Timeout: 7 * time.Second, Retries: 1},
				{Check: agent.HTTPCheck{URL: "http://127.0.0.1:8080/healthz", ExpectStatus: 204}, Timeout: 7 * time.Second, Retries: 0},
				{Check: agent.InterfaceCheck{Interface: "vxlan100"}, Timeout: 7 * time.Second, Retries: 1},
			},
		},
		{
			name: "flags win over the file and add checks after its own",
			given: []string{"--config", p, "--apply-mode", "stdin", "--validate-cmd", "true", "--check-timeout", "2s", "--check-deadline", "30s",
				"--check-cmd", "test -e /run/ok", "--check-tcp", "10.0.0.2:22,refused", "--check-http", "http://h/ready=204", "--check-interface", "lo"},
			wantApplier:  agent.ExecApplier{Command: "ip -batch -", Mode: agent.ApplyModeStdin, Path: "/run/net.json"},
			wantValidate: "true",
			wantDeadline: 30 * time.Second,
			wantChecks: []agent.CheckSpec{
				{Check: agent.ExecCheck{Label: "uplink", Command: "ping -c1 10.0.0.1"}, Timeout: 5 * time.Second, Retries: 2},
				{Check: agent.TCPCheck{Addr: "10.0.0.1:179", RefusedIsReachable: true}, Timeout: 2 * time.Second, Retries: 1},
				{Check: agent.HTTPCheck{URL: "http://127.0.0.1:8080/healthz", ExpectStatus: 204}, Timeout: 2 * time.Second, Retries: 0},
				{Check: agent.InterfaceCheck{Interface: "vxlan100"}, Timeout: 2 * time.Second, Retries: 1},
				{Check: agent.ExecCheck{Command: "test -e /run/ok"}, Timeout: 2 * time.Second, Retries: 1},
				{Check: agent.TCPCheck{Addr: "10.0.0.2:22", RefusedIsReachable: true}, Timeout: 2 * time.Second, Retries: 1},
				{Check: agent.HTTPCheck{URL: "http://h/ready", ExpectStatus: 204}, Timeout: 2 * time.Second, Retries: 1},
				{Check: agent.InterfaceCheck{Interface: "lo"}, Timeout: 2 * time.Second, Retries: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := agentConfigOf(t, tt.given...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.Applier, tt.wantApplier) || cfg.ValidateCmd != tt.wantValidate || cfg.CheckDeadline != tt.wantDeadline {
				t.Errorf("applier %#v, validate %q, deadline %s; want %#v, %q, %s",
					cfg.Applier, cfg.ValidateCmd, cfg.CheckDeadline, tt.wantApplier, tt.wantValidate, tt.wantDeadline)
			}
			if !reflect.DeepEqual(cfg.Checks, tt.wantChecks) {
				t.Errorf("checks:\n got %+v\nwant %+v", cfg.Checks, tt.wantChecks)
			}
			if cfg.Node != "n1" || cfg.StateDir != "/state" {
				t.Errorf("node %q, state dir %q", cfg.Node, cfg.StateDir)
			}
		})
	}
}

func TestHTTPCheckFlag(t *testing.T) {
	tests := []struct {
		name  string
		given string
		want  checkSpec
	}{
		{name: "url only", given: "http://h/healthz", want: checkSpec{HTTP: "http://h/healthz"}},
		{name: "url and status", given: "http://h/healthz=204", want: checkSpec{HTTP: "http://h/healthz", ExpectStatus: 204}},
		{name: "query with =", given: "http://h/q?a=b", want: checkSpec{HTTP: "http://h/q?a=b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := httpCheckFlag(tt.given)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestRun_CheckCmdFailing_ReportsInvalidWithTheCheck(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--server", env.URL, "--node", "n1", "--state-dir", t.TempDir(), "--log-level", "warn",
			"--check-cmd", `grep -q ` + desired("n1").GetFingerprint() + ` "$SLUICE_CONFIG"`, "--check-cmd", "echo bgp down; exit 1", "--check-timeout", "5s"}, &stderr)
	}()
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := configs.Create(context.Background(), contract.DesiredKey("n1"), desired("n1")); err != nil {
		t.Fatal(err)
	}
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	natstest.Eventually(t, 10*time.Second, "Invalid by the second check", func() bool {
		e, err := statuses.Get(context.Background(), "n1")
		return err == nil && e.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID &&
			e.Value.GetFailedCheck() == "exec: echo bgp down; exit 1" && strings.Contains(e.Value.GetCheckOutput(), "bgp down")
	})
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", c, stderr.String())
	}
}

// TestRun_WithNodeCredentials_RegistersAndApplies: an agent given only its
// node's credentials (least privilege: it binds, never creates or updates,
// a bucket) on a server in operator mode registers, applies its desired
// config and reports it.
func TestRun_WithNodeCredentials_RegistersAndApplies(t *testing.T) {
	env := natstest.StartSecure(t, contract.DefaultSettings())
	file, err := env.Creds.Issue(creds.RoleNode, "n1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgFile, []byte("nats:\n  creds: "+file+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--server", env.URL, "--node", "n1", "--state-dir", dir, "--config", cfgFile, "--log-level", "info"}, &stderr)
	}()
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	natstest.Eventually(t, 10*time.Second, "n1's presence", func() bool {
		_, err := nodes.Get(context.Background(), "n1")
		return err == nil
	})
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	d := desired("n1")
	d.Rollout, d.Operation = "r1", "op1"
	if _, err := configs.Create(context.Background(), contract.DesiredKey("n1"), d); err != nil {
		t.Fatal(err)
	}
	statuses := store.New(env.Buckets.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	natstest.Eventually(t, 10*time.Second, "n1 provisioned", func() bool {
		e, err := statuses.Get(context.Background(), "n1")
		return err == nil && e.Value.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && e.Value.GetFingerprint() == d.GetFingerprint()
	})
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", c, stderr.String())
	}
	if strings.Contains(stderr.String(), "Permissions Violation") {
		t.Fatalf("the agent was refused a permission:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "(user n1)") {
		t.Fatalf("the start-up log does not say which credentials it connects with:\n%s", stderr.String())
	}
}
