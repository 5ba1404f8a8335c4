package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

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
	if _, err := configs.Create(context.Background(), contract.DesiredKey("n1"), &sluicev1.DesiredConfig{Node: "n1", Fingerprint: "fp1"}); err != nil {
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
		{name: "bad duration", given: []string{"--config", file("dur.yaml", "checks:\n- exec: 'true'\n  timeout: soon\n")}, wantErr: "soon"},
		{name: "negative check retries", given: []string{"--config", file("neg.yaml", "checks:\n- exec: 'true'\n  retries: -2\n")}, wantErr: "checks[0].retries"},
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

func TestLoadConfig_BuildsChecksAndApplier(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.yaml")
	body := `applier: {kind: exec, command: "ip -batch -", mode: stdin}
validate: "test -s $SLUICE_CONFIG"
checkDeadline: 90s
checks:
- {name: uplink, exec: "ping -c1 10.0.0.1", timeout: 5s, retries: 2}
- {tcp: "10.0.0.1:179", refusedIsReachable: true}
- {http: "http://127.0.0.1:8080/healthz", expectStatus: 204}
- {interface: vxlan100}
`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Applier.Kind != "exec" || c.Applier.Command != "ip -batch -" || c.Validate == "" || time.Duration(c.CheckDeadline) != 90*time.Second {
		t.Fatalf("config = %+v", c)
	}
	var got []agent.Check
	for _, s := range c.Checks {
		ch, err := s.check()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ch)
	}
	want := []agent.Check{
		agent.ExecCheck{Label: "uplink", Command: "ping -c1 10.0.0.1"},
		agent.TCPCheck{Addr: "10.0.0.1:179", RefusedIsReachable: true},
		agent.HTTPCheck{URL: "http://127.0.0.1:8080/healthz", ExpectStatus: 204},
		agent.InterfaceCheck{Interface: "vxlan100"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("checks = %#v, want %#v", got, want)
	}
	if time.Duration(c.Checks[0].Timeout) != 5*time.Second || *c.Checks[0].Retries != 2 {
		t.Fatalf("first check timeout %v retries %v", c.Checks[0].Timeout, *c.Checks[0].Retries)
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
			"--check-cmd", `grep -q fp1 "$SLUICE_CONFIG"`, "--check-cmd", "echo bgp down; exit 1", "--check-timeout", "5s"}, &stderr)
	}()
	configs := store.New(env.Buckets.NodeConfigs, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	if _, err := configs.Create(context.Background(), contract.DesiredKey("n1"), &sluicev1.DesiredConfig{Node: "n1", Fingerprint: "fp1"}); err != nil {
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
