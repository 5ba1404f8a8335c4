// Package natstest starts embedded nats-servers with JetStream for tests,
// with the sluice buckets and stream created: one server (Start) or a
// cluster over loopback routes with replicated buckets (StartCluster).
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/embedded"
)

// Env is a running test server (or cluster) and a connection to it.
type Env struct {
	// Server is the server; in a Cluster, the first one as started.
	Server *server.Server
	// URL is the server's client URL; in a Cluster, every server's, comma-separated.
	URL      string
	StoreDir string
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Buckets  *contract.Buckets
	Settings contract.Settings
	// Creds is the credentials setup of a server started by StartSecure;
	// Conn is then a coordinator user's connection.
	Creds *creds.Setup
	// connOpts are the options of every connection Connect opens.
	connOpts []nats.Option
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
	e := &Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Settings: s}
	e.connectAndEnsure(t, true)
	return e
}

// StartSecure is Start on a server in operator mode with a fresh `sluice
// creds init` setup (Env.Creds): only issued users connect, with their
// roles' permissions. Conn is a coordinator user's connection (it may do
// everything); ConnectAs connects as another user.
func StartSecure(t testing.TB, s contract.Settings) *Env {
	t.Helper()
	setup, err := creds.Init(t.TempDir(), creds.InitOptions{})
	if err != nil {
		t.Fatalf("creds init: %v", err)
	}
	op, sys, accounts, err := setup.Trust()
	if err != nil {
		t.Fatal(err)
	}
	coordinator, err := setup.Issue(creds.RoleCoordinator, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir,
		Trust: &embedded.Trust{Operator: op, SystemAccount: sys, Accounts: accounts}})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	e := &Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Settings: s, Creds: setup,
		connOpts: []nats.Option{nats.UserCredentials(coordinator)}}
	e.connectAndEnsure(t, true)
	return e
}

// ConnectAs opens a connection with the credentials file credsFile (and
// opts), closed at cleanup; it fails the test when the server refuses it.
func (e *Env) ConnectAs(t testing.TB, credsFile string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.URL, append([]nats.Option{nats.UserCredentials(credsFile), nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("connect with %s: %v", credsFile, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// StartBare starts a server like Start but creates no bucket and no stream:
// for tests of who creates them. Buckets is nil.
func StartBare(t testing.TB) *Env {
	t.Helper()
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	e := &Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Settings: contract.DefaultSettings()}
	e.connectAndEnsure(t, false)
	return e
}

// connectAndEnsure connects Conn and JS and, with ensure, creates every
// bucket and the stream with e.Settings and opens Buckets.
func (e *Env) connectAndEnsure(t testing.TB, ensure bool) {
	t.Helper()
	e.Conn = e.Connect(t)
	js, err := jetstream.New(e.Conn)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	e.JS = js
	if !ensure {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := contract.Ensure(ctx, js, e.Settings); err != nil {
		t.Fatalf("ensure buckets: %v", err)
	}
	if e.Buckets, err = contract.OpenBuckets(ctx, js); err != nil {
		t.Fatalf("open buckets: %v", err)
	}
}

// Connect opens another connection to the server, closed at cleanup.
func (e *Env) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.URL, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, e.connOpts...)...)
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
