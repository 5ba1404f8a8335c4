package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
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

func TestRun_NotReadyUntilBoundAndServing(t *testing.T) {
	env := natstest.StartBare(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
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
	natstest.Eventually(t, 10*time.Second, "not ready while binding", func() bool {
		c, body := get("/readyz")
		return c == http.StatusServiceUnavailable && body == "not ready: binding the buckets\n"
	})
	if c, _ := get("/healthz"); c != http.StatusOK {
		t.Fatalf("/healthz %d while binding", c)
	}
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
	defer ecancel()
	if err := contract.Ensure(ectx, env.JS, contract.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 15*time.Second, "ready once serving", func() bool {
		c, body := get("/readyz")
		return c == http.StatusOK && body == "ready: serving the API\n"
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d:\n%s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
