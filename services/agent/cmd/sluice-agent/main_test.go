package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/hostnet"
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
	natstest.Eventually(t, waitFor, "presence with labels", func() bool {
		e, err := nodes.Get(context.Background(), "n1")
		return err == nil && e.Value.GetLabels()["rack"] == "r1" && e.Value.GetAgentVersion() == version
	})
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := configs.Create(context.Background(), contract.DesiredKey("n1"), desired("n1")); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, waitFor, "config.json in the state dir", func() bool {
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
		{name: "Kubernetes prefix", given: "topology.kubernetes.io/zone=eu-1a", want: map[string]string{"topology.kubernetes.io/zone": "eu-1a"}},
		{name: "value over 63 characters", given: "zone=" + strings.Repeat("a", 64), wantErr: true},
		{name: "value with a control character", given: "zone=a\x1b[31m", wantErr: true},
		{name: "key with a space", given: "my zone=a", wantErr: true},
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
		{name: "unknown applier", given: []string{"--applier", "nftables"}, wantErr: `--applier (applier.kind) "nftables": want file, exec, netlink, frr or netlink,frr`},
		{name: "netlink applier without uplink or VTEP address", given: []string{"--applier", "netlink", "--vrfs", "off"},
			wantErr: "--applier netlink: invalid host network settings: uplink: one of uplink and vtepAddress is required"},
		{name: "netlink: bad VTEP address", given: []string{"--applier", "netlink", "--vtep-address", "192.0.2"}, wantErr: `--vtep-address "192.0.2": not an IP address`},
		{name: "netlink: bad node address", given: []string{"--applier", "netlink", "--uplink", "eth0", "--node-address", "100:10.0.0.1/24"},
			wantErr: `--node-address "100:10.0.0.1/24": want VLAN=CIDR`},
		{name: "netlink: node address without a prefix length", given: []string{"--applier", "netlink", "--uplink", "eth0", "--node-address", "100=10.0.0.1"},
			wantErr: `--node-address "100=10.0.0.1": "10.0.0.1" is not an address with its prefix length`},
		{name: "netlink: VLAN out of range", given: []string{"--applier", "netlink", "--uplink", "eth0", "--node-address", "5000=10.0.0.1/24"},
			wantErr: `VLAN "5000": want 1-4094`},
		{name: "netlink: bad flood peer", given: []string{"--applier", "netlink", "--uplink", "eth0", "--flood-peers", "192.0.2.2,peer"},
			wantErr: `--flood-peers: "peer" is not an IP address`},
		{name: "netlink: port 0", given: []string{"--applier", "netlink", "--uplink", "eth0", "--vxlan-port", "0"}, wantErr: "--vxlan-port 0: want 1-65535"},
		{name: "netlink: bad vrfs", given: []string{"--applier", "netlink", "--uplink", "eth0", "--vrfs", "maybe"}, wantErr: "vrfs"},
		{name: "netlink: missing host file", given: []string{"--applier", "netlink", "--uplink", "eth0", "--netlink-file", filepath.Join(dir, "no-such-netlink.yaml")},
			wantErr: "--netlink-file: open " + filepath.Join(dir, "no-such-netlink.yaml")},
		{name: "netlink: unknown field in the host file", given: []string{"--applier", "netlink", "--uplink", "eth0", "--netlink-file", file("own.yaml", "nodeAdresses: {}\n")},
			wantErr: "nodeAdresses"},
		{name: "netlink: unknown field in the file", given: []string{"--applier", "netlink", "--config", file("nl.yaml", "netlink:\n  uplnk: eth0\n")}, wantErr: "uplnk"},
		{name: "netlink: multicast anycast MAC in the file", given: []string{"--config", file("mac.yaml", "applier: {kind: netlink}\nnetlink: {uplink: eth0, vrfs: 'off', anycastMAC: '01:00:5e:00:00:01'}\n")},
			wantErr: "anycastMAC"},
		{name: "exec applier without a command", given: []string{"--applier", "exec"}, wantErr: "--apply-cmd (applier.command): required"},
		{name: "bad apply mode", given: []string{"--applier", "exec", "--apply-cmd", "true", "--apply-mode", "pipe"}, wantErr: `--apply-mode (applier.mode) "pipe"`},
		{name: "negative retries", given: []string{"--check-retries", "-1"}, wantErr: "--check-retries"},
		{name: "bad http status", given: []string{"--check-http", "http://x/=999"}, wantErr: "--check-http http://x/=999: status 999"},
		{name: "missing config file", given: []string{"--config", filepath.Join(dir, "none.yaml")}, wantErr: "--config"},
		{name: "unknown field", given: []string{"--config", file("unknown.yaml", "chekcs: []\n")}, wantErr: "chekcs"},
		{name: "check with two kinds", given: []string{"--config", file("two.yaml", "checks:\n- exec: 'true'\n- tcp: a:1\n  interface: lo\n")},
			wantErr: "checks[1]: set exactly one of exec, tcp, http, interface, gateway, peer, uplink"},
		{name: "check with no kind", given: []string{"--config", file("none.yaml", "checks:\n- name: uplink\n")},
			wantErr: `checks[0]: check "uplink": set exactly one of exec, tcp, http, interface, gateway, peer, uplink`},
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
		{name: "zero applier timeout", given: []string{"--applier-timeout", "0s"}, wantErr: "--applier-timeout 0s: must be positive"},
		{name: "negative validate timeout", given: []string{"--validate-timeout", "-1s"}, wantErr: "--validate-timeout -1s: must be positive"},
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
validateTimeout: 20s
applierTimeout: 3m
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
		// wantTimeouts: ApplierTimeout, then ValidateTimeout.
		wantTimeouts [2]time.Duration
		wantChecks   []agent.CheckSpec
	}{
		{
			name:         "defaults: file applier in the state dir, no checks",
			wantApplier:  agent.NewFileApplier("/state/config.json"),
			wantDeadline: agent.DefaultCheckDeadline,
			wantTimeouts: [2]time.Duration{agent.DefaultApplierTimeout, agent.DefaultValidateTimeout},
		},
		{
			name:         "the file",
			given:        []string{"--config", p},
			wantApplier:  agent.ExecApplier{Command: "ip -batch -", Mode: agent.ApplyModeFile, Path: "/run/net.json"},
			wantValidate: "test -s $SLUICE_CONFIG",
			wantDeadline: 90 * time.Second,
			wantTimeouts: [2]time.Duration{3 * time.Minute, 20 * time.Second},
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
				"--applier-timeout", "45s", "--validate-timeout", "5s",
				"--check-cmd", "test -e /run/ok", "--check-tcp", "10.0.0.2:22,refused", "--check-http", "http://h/ready=204", "--check-interface", "lo"},
			wantApplier:  agent.ExecApplier{Command: "ip -batch -", Mode: agent.ApplyModeStdin, Path: "/run/net.json"},
			wantValidate: "true",
			wantDeadline: 30 * time.Second,
			wantTimeouts: [2]time.Duration{45 * time.Second, 5 * time.Second},
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
			if got := [2]time.Duration{cfg.ApplierTimeout, cfg.ValidateTimeout}; got != tt.wantTimeouts {
				t.Errorf("applier timeout, validate timeout %v; want %v", got, tt.wantTimeouts)
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
	natstest.Eventually(t, waitFor, "Invalid by the second check", func() bool {
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
	natstest.Eventually(t, waitFor, "n1's presence", func() bool {
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
	natstest.Eventually(t, waitFor, "n1 provisioned", func() bool {
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

// TestNetlinkHost_FileAndFlags: the netlink applier's host settings come
// from the --config file's netlink section, each flag given winning over it.
func TestNetlinkHost_FileAndFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	body := `applier: {kind: netlink}
netlink:
  uplink: eth1
  vxlanPort: 4790
  floodPeers: [192.0.2.2, 192.0.2.3]
  nodeAddresses: {100: 10.100.0.11/24}
  vrfs: "off"
  routingDaemonFile: /run/sluice/routing.json
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	hostOf := func(args ...string) hostnet.Host {
		t.Helper()
		var o options
		fs := o.flagSet(io.Discard)
		if err := fs.Parse(append([]string{"--node", "n1", "--config", p}, args...)); err != nil {
			t.Fatal(err)
		}
		fc, err := loadConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		h, err := o.netlink.host(set, fc.Netlink)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	fromFile := hostnet.Host{Uplink: "eth1", VXLANPort: 4790,
		FloodPeers:    []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")},
		NodeAddresses: map[uint32]netip.Prefix{100: netip.MustParsePrefix("10.100.0.11/24")}, VRFs: "off", RoutingDaemonFile: "/run/sluice/routing.json"}
	if got := hostOf(); !reflect.DeepEqual(got, fromFile) {
		t.Errorf("from the file:\n got %+v\nwant %+v", got, fromFile)
	}
	withFlags := fromFile
	withFlags.Uplink, withFlags.VTEPAddress, withFlags.FloodPeers = "eth2", netip.MustParseAddr("192.0.2.1"), []netip.Addr{netip.MustParseAddr("192.0.2.9")}
	withFlags.NodeAddresses = map[uint32]netip.Prefix{100: netip.MustParsePrefix("10.100.0.12/24"), 200: netip.MustParsePrefix("fd00:200::12/64")}
	if got := hostOf("--uplink", "eth2", "--vtep-address", "192.0.2.1", "--flood-peers", "192.0.2.9",
		"--node-address", "100=10.100.0.12/24", "--node-address", "200=fd00:200::12/64"); !reflect.DeepEqual(got, withFlags) {
		t.Errorf("flags over the file:\n got %+v\nwant %+v", got, withFlags)
	}
	// A host's own file (--netlink-file) over the section, flags over both.
	own := filepath.Join(t.TempDir(), "netlink.yaml")
	if err := os.WriteFile(own, []byte("vtepAddress: 192.0.2.7\nnodeAddresses: {100: 10.100.0.17/24}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withOwn := fromFile
	withOwn.VTEPAddress, withOwn.NodeAddresses = netip.MustParseAddr("192.0.2.7"), map[uint32]netip.Prefix{100: netip.MustParsePrefix("10.100.0.17/24")}
	if got := hostOf("--netlink-file", own); !reflect.DeepEqual(got, withOwn) {
		t.Errorf("the host's own file over the section:\n got %+v\nwant %+v", got, withOwn)
	}
	withOwn.Uplink = "eth3"
	if got := hostOf("--netlink-file", own, "--uplink", "eth3"); !reflect.DeepEqual(got, withOwn) {
		t.Errorf("a flag over the host's own file:\n got %+v\nwant %+v", got, withOwn)
	}
	// The whole config builds the netlink applier (vrfs off: no VRF probe).
	cfg, err := agentConfigOf(t, "--config", p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Applier.(*hostnet.Applier); !ok {
		t.Fatalf("applier %T; want *hostnet.Applier", cfg.Applier)
	}
}

// TestNetlinkApplier_WithoutKernelVRFs: with VRF devices (the default) on a
// kernel that cannot make them, the agent does not start, and says why and
// what to set; where the kernel can, it starts.
func TestNetlinkApplier_WithoutKernelVRFs(t *testing.T) {
	_, err := agentConfigOf(t, "--applier", "netlink", "--uplink", "eth0")
	probe := hostnet.ProbeVRF()
	switch {
	case probe == nil && err != nil:
		t.Fatalf("the kernel has VRFs, yet: %v", err)
	case probe != nil && errors.Is(probe, hostnet.ErrNoVRFSupport):
		if err == nil || !strings.Contains(err.Error(), "CONFIG_NET_VRF") || !strings.Contains(err.Error(), "vrfs: off") {
			t.Fatalf("got %v; want the missing CONFIG_NET_VRF and vrfs: off named", err)
		}
	case probe != nil:
		t.Skipf("cannot tell whether the kernel has VRFs (needs CAP_NET_ADMIN and CAP_SYS_ADMIN): %v", probe)
	}
}
