package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/testaddr"
	"github.com/sluicehq/sluice/pkg/contract"
)

// lockedBuffer is a log destination goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor bounds the waits on the agent. Margin: each returns as soon as
// its condition holds; 30s covers a cold start on a loaded 2-core machine
// and the agent's backoff between connect attempts many times over.
const waitFor = 30 * time.Second

func getURL(url string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second} // margin: a local handler answers in milliseconds
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// probe runs the binary's --probe mode against url.
func probe(url string) (int, string) {
	var out bytes.Buffer
	code := run(context.Background(), []string{"--probe", url}, &out)
	return code, out.String()
}

func TestRun_WaitsForNATSThenIsReady_AndProbesSaySo(t *testing.T) {
	natsAddr, httpAddr := testaddr.Held(t), testaddr.Held(t)
	readyz := "http://" + httpAddr + "/readyz"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--server", "nats://" + natsAddr, "--http-addr", httpAddr, "--node", "n1", "--state-dir", t.TempDir()}, &logs)
	}()

	natstest.Eventually(t, waitFor, "/readyz to say NATS is not reachable yet", func() bool {
		st, body := getURL(readyz)
		return st == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: NATS not reachable yet (attempt ")
	})
	if c, out := probe(readyz); c != 1 || !strings.Contains(out, "not ready: NATS not reachable yet") {
		t.Fatalf("probe while NATS is unreachable: exit %d, %q; want 1 and why", c, out)
	}
	if c, out := probe("http://" + httpAddr + "/healthz"); c != 0 {
		t.Fatalf("liveness probe: exit %d, %q; want 0", c, out)
	}

	natstest.StartAt(t, t.TempDir(), natsAddr, contract.DefaultSettings())
	natstest.Eventually(t, waitFor, "the agent to be ready once NATS listens", func() bool {
		st, body := getURL(readyz)
		return st == http.StatusOK && body == "ready: buckets bound; node n1\n"
	})
	if c, out := probe(readyz); c != 0 || out != "ready: buckets bound; node n1\n" {
		t.Fatalf("probe once ready: exit %d, %q; want 0 and the line", c, out)
	}
	if _, metrics := getURL("http://" + httpAddr + "/metrics"); !strings.Contains(metrics, "# TYPE sluice_agent_apply_seconds histogram") ||
		!strings.Contains(metrics, "sluice_nats_connected 1") {
		t.Fatalf("/metrics lacks the agent's metrics:\n%s", metrics)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0:\n%s", c, logs.String())
		}
	case <-time.After(waitFor):
		t.Fatal("run did not return after cancel")
	}
	if c, _ := probe(readyz); c != 1 {
		t.Fatalf("probe after the agent stopped: exit %d, want 1", c)
	}
}
