package dev

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
)

// With HTTPAddr, the whole system serves /readyz (ready once every service
// and agent is) and /metrics (the services' and the agents' metrics).
func TestDev_HTTPAddr_ServesReadinessAndEveryServicesMetrics(t *testing.T) {
	s, err := Start(context.Background(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: 2, Stderr: io.Discard,
		HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	if s.HTTPAddr() == "" {
		t.Fatal("no address served")
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.HTTPAddr() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	natstest.Eventually(t, 30*time.Second, "/readyz 200", func() bool {
		code, body := get("/readyz")
		return code == http.StatusOK && strings.Contains(body, "ready: 3 services and 2 agents")
	})
	code, body := get("/metrics")
	for _, m := range []string{"sluice_coordinator_is_leader 1", "sluice_reaper_deletions_total", "sluice_reaper_last_pass_timestamp_seconds", "sluice_agent_apply_seconds", "go_goroutines"} {
		if code != http.StatusOK || !strings.Contains(body, m) {
			t.Errorf("/metrics (%d) has no %q", code, m)
		}
	}
}
