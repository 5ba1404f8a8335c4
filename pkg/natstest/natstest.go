// Package natstest starts an embedded nats-server with JetStream for tests,
// with the sluice buckets and stream created.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/embedded"
)

// Env is a running test server and a connection to it.
type Env struct {
	Server   *server.Server
	URL      string
	StoreDir string
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Buckets  *contract.Buckets
	Settings contract.Settings
}

// Start starts a server on a free port with storage in a fresh t.TempDir,
// ensures the sluice buckets with settings s, and stops it all at cleanup.
func Start(t testing.TB, s contract.Settings) *Env {
	t.Helper()
	return StartAt(t, t.TempDir(), "127.0.0.1:-1", s)
}

// StartAt is Start with a given store directory and listen address, so a
// test can restart a server on the same data.
func StartAt(t testing.TB, dir, listen string, s contract.Settings) *Env {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{Listen: listen, StoreDir: dir})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := contract.Ensure(ctx, js, s); err != nil {
		t.Fatalf("ensure buckets: %v", err)
	}
	b, err := contract.OpenBuckets(ctx, js)
	if err != nil {
		t.Fatalf("open buckets: %v", err)
	}
	return &Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Conn: nc, JS: js, Buckets: b, Settings: s}
}

// Connect opens another connection to the server, closed at cleanup.
func (e *Env) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
