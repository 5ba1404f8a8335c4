// Package natstest starts embedded nats-servers with JetStream for tests,
// with the sluice buckets and stream created: one server (Start) or a
// cluster over loopback routes with replicated buckets (StartCluster).
package natstest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/natsauth"
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
	Buckets  *buckets.Set
	Settings contract.Settings
	// Creds is the credentials setup of a server started by StartSecure;
	// Conn is then a coordinator user's connection.
	Creds *creds.Setup
	// connOpts are the options of every connection Connect opens.
	connOpts []nats.Option

	mu         sync.Mutex
	violations []string // permissions refused on ConnectRole's connections
}

// EnvSecure, set to 1, makes Start and StartAt run the server in operator
// mode (as StartSecure): every suite built on them then runs with each
// component connected as a user of its own role (ConnectRole), and any
// permission the server refuses fails the test. `make test-secure` runs
// the end-to-end suite so.
const EnvSecure = "SLUICE_TEST_SECURE"

// Start starts a server on a free port with storage in a fresh t.TempDir,
// ensures the sluice buckets with settings s, and stops it all at cleanup.
func Start(t testing.TB, s contract.Settings) *Env {
	t.Helper()
	return StartAt(t, t.TempDir(), "127.0.0.1:-1", s)
}

// StartAt is Start with a given store directory and listen address, so a
// test can restart a server on the same data (with EnvSecure, on the same
// credentials setup, kept in dir/creds).
func StartAt(t testing.TB, dir, listen string, s contract.Settings) *Env {
	t.Helper()
	if os.Getenv(EnvSecure) == "1" {
		return startSecure(t, dir, listen, s)
	}
	srv, err := embedded.Start(embedded.Options{Listen: listen, StoreDir: dir})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	e := &Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Settings: s}
	e.connectAndEnsure(t, true)
	return e
}

// InProcess is a restartable in-process server as its clients see it: a
// connection made through it (nats.InProcessServer) reaches whichever
// server StartInProcess started last, and reconnects to the next one after
// a restart, as a client of a server restarted on the same port does.
type InProcess struct{ cur atomic.Pointer[server.Server] }

// Server is the server started last (nil before the first).
func (p *InProcess) Server() *server.Server { return p.cur.Load() }

// InProcessConn is a new in-process connection to the server running now.
func (p *InProcess) InProcessConn() (net.Conn, error) {
	srv := p.cur.Load()
	if srv == nil || !srv.Running() {
		return nil, errors.New("the in-process server is down")
	}
	return srv.InProcessConn()
}

// StartInProcess is StartAt for a server that listens on no port, reached
// through via: every connection Connect opens is in-process. For the chaos
// suite on virtual time (testing/synctest), where a socket would stop the
// clock. Not with EnvSecure.
func StartInProcess(t testing.TB, dir string, s contract.Settings, via *InProcess) *Env {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{InProcess: true, StoreDir: dir})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	via.cur.Store(srv)
	e := &Env{Server: srv, StoreDir: dir, Settings: s, connOpts: []nats.Option{nats.InProcessServer(via)}}
	e.connectAndEnsure(t, true)
	return e
}

// StartSecure is Start on a server in operator mode with a `sluice creds
// init` setup (Env.Creds): only issued users connect, with their roles'
// permissions. Conn is a coordinator user's connection (it may do
// everything); ConnectRole and ConnectAs connect as other users. A
// permission the server refuses on a connection ConnectRole opened fails
// the test.
func StartSecure(t testing.TB, s contract.Settings) *Env {
	t.Helper()
	return startSecure(t, t.TempDir(), "127.0.0.1:-1", s)
}

func startSecure(t testing.TB, dir, listen string, s contract.Settings) *Env {
	t.Helper()
	setup, trust := secureSetup(t, dir)
	srv, err := embedded.Start(embedded.Options{Listen: listen, StoreDir: dir, Trust: trust})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	e := &Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Settings: s}
	e.secure(t, setup)
	e.connectAndEnsure(t, true)
	return e
}

// secureSetup loads the credentials setup kept in dir/creds, or makes one
// there, and returns it with the trust a server in operator mode needs.
func secureSetup(t testing.TB, dir string) (*creds.Setup, *embedded.Trust) {
	t.Helper()
	credsDir := filepath.Join(dir, "creds")
	setup, err := creds.Load(credsDir)
	if err != nil {
		if setup, err = creds.Init(credsDir, creds.InitOptions{}); err != nil {
			t.Fatalf("creds init: %v", err)
		}
	}
	op, sys, accounts, err := setup.Trust()
	if err != nil {
		t.Fatal(err)
	}
	return setup, &embedded.Trust{Operator: op, SystemAccount: sys, Accounts: accounts}
}

// secure makes e connect as a coordinator user of setup, and fails the
// test at cleanup for every permission the server refused a connection
// opened with RoleOptions.
func (e *Env) secure(t testing.TB, setup *creds.Setup) {
	t.Helper()
	e.Creds = setup
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, v := range e.violations {
			t.Errorf("the server refused a permission: %s", v)
		}
	})
	file, err := e.credsFile(creds.RoleCoordinator, "")
	if err != nil {
		t.Fatal(err)
	}
	e.connOpts = []nats.Option{nats.UserCredentials(file)}
}

// ConnectRole opens a connection for a component of role (and node, for
// an agent), closed at cleanup: without Creds, a plain Connect; with them,
// as a user of that role (see RoleOptions).
func (e *Env) ConnectRole(t testing.TB, role, node string) *nats.Conn {
	t.Helper()
	if e.Creds == nil {
		return e.Connect(t)
	}
	nc, err := nats.Connect(e.URL, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)},
		e.RoleOptions(t, role, node)...)...)
	if err != nil {
		t.Fatalf("connect as %s %s: %v", role, node, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// RoleOptions are the options of a connection for a component of role
// (and node): none without Creds; with them, the credentials of a user of
// that role (issued once per role and node), an error handler that records
// every permission the server refuses (the test fails at cleanup), and a
// node's own inbox prefix. For harnesses that connect their own way.
func (e *Env) RoleOptions(t testing.TB, role, node string) []nats.Option {
	t.Helper()
	if e.Creds == nil {
		return nil
	}
	file, err := e.credsFile(role, node)
	if err != nil {
		t.Fatal(err)
	}
	name := role
	if node != "" {
		name = node
	}
	opts := []nats.Option{nats.UserCredentials(file), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if natsauth.IsPermissionViolation(err) {
			e.mu.Lock()
			e.violations = append(e.violations, name+": "+err.Error())
			e.mu.Unlock()
		}
	})}
	if node != "" {
		opts = append(opts, nats.CustomInboxPrefix(creds.NodeInboxPrefix(node)))
	}
	return opts
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

// CredsFile is the credentials file of a user of role (and node), issued
// once; "" without Creds. For binaries started by a test (--creds).
func (e *Env) CredsFile(t testing.TB, role, node string) string {
	t.Helper()
	if e.Creds == nil {
		return ""
	}
	file, err := e.credsFile(role, node)
	if err != nil {
		t.Fatal(err)
	}
	return file
}

func (e *Env) credsFile(role, node string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.Creds.UserFile(role, node)
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// A JetStream API request made while a new cluster elects its meta
	// leader may go unanswered (the chaos rehearsal's seed 153: one 30 s
	// attempt timed out): each attempt has its own deadline, and a failed
	// one is tried again (Ensure creates what is missing, keeps what is
	// there) until the whole budget is spent.
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		err := buckets.Ensure(actx, js, e.Settings)
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("ensure buckets (%d attempts): %v", attempt, err)
		}
		t.Logf("ensure buckets, attempt %d: %v; trying again", attempt, err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		}
	}
	if e.Buckets, err = buckets.BindAll(ctx, js); err != nil {
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

// Eventually polls cond every 10ms until it holds or timeout passes. It
// returns as soon as cond holds, so a generous timeout (30s) costs nothing
// and survives a loaded machine.
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
