package cmdutil

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
)

func TestSettingsFromFlagsAndEnv(t *testing.T) {
	def := contract.DefaultSettings()
	tests := []struct {
		name         string
		env          map[string]string
		args         []string
		wantReplicas int
		wantLease    time.Duration
		wantNode     time.Duration // zero: the default
		wantErr      string
	}{
		{name: "defaults", wantReplicas: 1, wantLease: def.LeaderLease},
		{name: "flags", args: []string{"--replicas", "3", "--leader-lease", "4s", "--node-lease", "30s"}, wantReplicas: 3, wantLease: 4 * time.Second, wantNode: 30 * time.Second},
		{name: "env", env: map[string]string{EnvReplicas: "3", EnvLeaderLease: "2s", EnvNodeLease: "1m"}, wantReplicas: 3, wantLease: 2 * time.Second, wantNode: time.Minute},
		{name: "flag beats env", env: map[string]string{EnvReplicas: "3", EnvNodeLease: "1m"}, args: []string{"--replicas", "1", "--node-lease", "2m"}, wantReplicas: 1, wantLease: def.LeaderLease, wantNode: 2 * time.Minute},
		{name: "lease under a second", args: []string{"--leader-lease", "900ms"}, wantErr: "--leader-lease 900ms: want at least 1s"},
		{name: "node lease under a second", args: []string{"--node-lease", "500ms"}, wantErr: "--node-lease 500ms: want at least 1s"},
		{name: "node lease env not a duration", env: map[string]string{EnvNodeLease: "180"}, wantErr: `SLUICE_NODE_LEASE="180": want a duration`},
		{name: "zero replicas", args: []string{"--replicas", "0"}, wantErr: "--replicas 0: want 1 to 5"},
		{name: "env not a number", env: map[string]string{EnvReplicas: "three"}, wantErr: `SLUICE_REPLICAS="three": want a number of replicas`},
		{name: "env not a duration", env: map[string]string{EnvLeaderLease: "10"}, wantErr: `SLUICE_LEADER_LEASE="10": want a duration`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var c Common
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.Register(fs)
			c.RegisterLeaderLease(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := c.Check()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Check() = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check() = %v", err)
			}
			wantNode := tc.wantNode
			if wantNode == 0 {
				wantNode = def.NodeLease
			}
			if s := c.Settings(); s.Replicas != tc.wantReplicas || s.LeaderLease != tc.wantLease || s.NodeLease != wantNode {
				t.Fatalf("settings: replicas %d, lease %s, node lease %s; want %d, %s and %s",
					s.Replicas, s.LeaderLease, s.NodeLease, tc.wantReplicas, tc.wantLease, wantNode)
			}
		})
	}
}

func TestMain_BadSettingsExit2BeforeConnecting(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
	c.Register(fs)
	var stderr bytes.Buffer
	built := false
	code := c.Main(context.Background(), fs, []string{"--replicas", "9", "--server", "nats://127.0.0.1:1"}, &stderr, nil,
		func(Runtime) (Service, error) { built = true; return nil, nil })
	if code != 2 || built || !strings.Contains(stderr.String(), "sluice-test: --replicas 9: want 1 to 5") {
		t.Fatalf("code %d built %v stderr %q, want 2, nothing built and the flag named", code, built, stderr.String())
	}
}

func TestMain_BadLogFormatExit2NamingTheFlag(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
	c.Register(fs)
	var stderr bytes.Buffer
	code := c.Main(context.Background(), fs, []string{"--log-format", "yaml", "--server", "nats://127.0.0.1:1"}, &stderr, nil,
		func(Runtime) (Service, error) { return nil, nil })
	if code != 2 || !strings.Contains(stderr.String(), `--log-format "yaml": want auto, text or json`) {
		t.Fatalf("code %d stderr %q, want 2 and the flag named", code, stderr.String())
	}
}
