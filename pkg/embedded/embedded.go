// Package embedded runs a nats-server with JetStream inside the process, for
// `sluice dev` and for tests. A single server (Start) re-opens its
// JetStream by itself after a store write error once there is space again
// (heal.go).
package embedded

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// maxPayload allows large rollouts' records and configs.
const maxPayload = 8 << 20

// readyTimeout bounds a server's start: a restarted server replays its
// store first, which on a loaded machine can take more than a few seconds.
const readyTimeout = 30 * time.Second

// Options says where the server listens and stores.
type Options struct {
	// Listen is host:port; port -1 picks a free port. Ignored with InProcess.
	Listen string
	// InProcess starts a server that listens on no port: clients connect
	// with nats.InProcessServer (the chaos suite on virtual time, whose
	// clock cannot wait on a socket).
	InProcess bool
	// StoreDir holds JetStream's file storage.
	StoreDir string
	// Logs turns on the server's own logging to stderr.
	Logs bool
	// Trust, when set, runs the server in operator mode: only users of
	// these accounts connect, with their JWTs' permissions (see pkg/creds).
	Trust *Trust
	// Log receives the server's re-opening of JetStream after a store
	// write error (heal.go); the zero value logs nothing.
	Log zerolog.Logger
}

// resolverSync is how often a server's account resolver compares its
// accounts with its peers': a server that was stopped while an account
// update (a revocation) was pushed learns it from them within this much of
// being back. Short here: embedded servers are for dev and tests.
const resolverSync = 5 * time.Second

// Trust is an operator, its system account and the account JWTs the server
// starts with. They are kept in a full resolver under StoreDir/jwt, so
// accounts pushed later (a revocation) are applied at once and kept.
type Trust struct {
	Operator      *jwt.OperatorClaims
	SystemAccount string
	Accounts      map[string]string // public key → account JWT
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	var host string
	var port int
	if !o.InProcess {
		h, portStr, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", o.Listen, err)
		}
		if port, err = strconv.Atoi(portStr); err != nil {
			return nil, fmt.Errorf("listen address %q: port: %w", o.Listen, err)
		}
		host = h
	}
	opts := &server.Options{
		Host:       host,
		Port:       port,
		DontListen: o.InProcess,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      !o.Logs,
		MaxPayload: maxPayload,
	}
	if o.Trust != nil {
		if err := o.Trust.configure(opts); err != nil {
			return nil, err
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	if o.Logs {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server on %s did not become ready within %s", o.Listen, readyTimeout)
	}
	if !o.InProcess { // on virtual time (the chaos suite) a ticker would never fire
		go heal(s, o.StoreDir, o.Log)
	}
	return s, nil
}

// configure puts the operator, the system account and a full resolver
// holding the accounts into opts.
func (t *Trust) configure(opts *server.Options) error {
	r, err := server.NewDirAccResolver(filepath.Join(opts.StoreDir, "jwt"), 0, resolverSync, server.NoDelete)
	if err != nil {
		return fmt.Errorf("account resolver: %w", err)
	}
	for pub, tok := range t.Accounts {
		if err := r.Store(pub, tok); err != nil {
			return fmt.Errorf("account resolver: store %s: %w", pub, err)
		}
	}
	// A restart reuses options the server filled in: the keys it derived
	// from the operator would conflict with setting the operator again.
	opts.TrustedKeys = nil
	opts.TrustedOperators = []*jwt.OperatorClaims{t.Operator}
	opts.SystemAccount = t.SystemAccount
	opts.AccountResolver = r
	return nil
}
