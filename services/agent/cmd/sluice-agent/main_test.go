package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
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

func TestRun_RejectsUnknownApplier(t *testing.T) {
	var stderr bytes.Buffer
	if c := run(context.Background(), []string{"--node", "n1", "--applier", "netlink"}, &stderr); c != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", c, stderr.String())
	}
}
