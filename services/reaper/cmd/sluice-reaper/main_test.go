package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
)

func TestRun_StopsCleanlyOnCancel(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"--server", env.URL, "--interval", "1s"}, &stderr) }()
	// The reaper has started once it has connected under its name.
	natstest.Eventually(t, 10*time.Second, "reaper connection", func() bool {
		cz, err := env.Server.Connz(nil)
		if err != nil {
			return false
		}
		for _, c := range cz.Conns {
			if c.Name == "sluice-reaper" {
				return true
			}
		}
		return false
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRun_RejectsTooShortGrace(t *testing.T) {
	var stderr bytes.Buffer
	if c := run(context.Background(), []string{"--grace", "10ms"}, &stderr); c != 2 {
		t.Fatalf("exit code %d, want 2; stderr:\n%s", c, stderr.String())
	}
}

func TestRun_ReplicasFromEnvAreVerifiedAgainstTheBuckets(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings()) // R1 buckets
	t.Setenv("SLUICE_REPLICAS", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	if c := run(ctx, []string{"--server", env.URL}, &stderr); c != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", c, stderr.String())
	}
	for _, want := range []string{"bucket sluice-intents: replicas is 1, reaper wants at least 3", "--replicas 3"} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}
