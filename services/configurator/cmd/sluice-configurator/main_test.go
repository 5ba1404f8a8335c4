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
	"github.com/sluicehq/sluice/pkg/buckets"
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

// wait bounds the waits on the configurator. Margin: each wait returns as
// soon as its condition holds; 30s covers a cold start on a loaded 2-core
// machine many times over.
const wait = 30 * time.Second

func TestRun_NotReadyUntilBoundAndServing(t *testing.T) {
	env := natstest.StartBare(t)
	addr := testaddr.Held(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"--server", env.URL, "--http-addr", addr}, &stderr) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// It creates its own buckets, then waits for the coordinator's.
	natstest.Eventually(t, wait, "not ready while binding", func() bool {
		c, body := get("/readyz")
		return c == http.StatusServiceUnavailable && body == "not ready: binding the buckets\n"
	})
	if c, _ := get("/healthz"); c != http.StatusOK {
		t.Fatalf("/healthz %d while binding", c)
	}
	ectx, ecancel := context.WithTimeout(ctx, wait)
	defer ecancel()
	if err := buckets.Ensure(ectx, env.JS, contract.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, "ready once serving", func() bool {
		c, body := get("/readyz")
		return c == http.StatusOK && body == "ready: serving the API\n"
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d:\n%s", c, stderr.String())
		}
	case <-time.After(wait):
		t.Fatal("run did not return after cancel")
	}
}

func TestRun_NegativeDeleteAfterRefusedNamingTheFlag(t *testing.T) {
	for _, v := range []string{"-5s", "soon"} {
		var stderr lockedBuffer
		code := run(context.Background(), []string{"--registry-delete-after", v}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), `invalid value "`+v+`" for flag -registry-delete-after`) {
			t.Errorf("--registry-delete-after %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr.String())
		}
	}
	if d, err := parseDeleteAfter("0"); err != nil || d != 0 {
		t.Errorf("--registry-delete-after 0: %s, %v; want 0 (used as given)", d, err)
	}
}
