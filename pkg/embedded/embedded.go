// Package embedded runs a nats-server with JetStream inside the process, for
// `sluice dev` and for tests.
package embedded

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// maxPayload allows large rollouts' records and configs.
const maxPayload = 8 << 20

// readyTimeout bounds a server's start: a restarted server replays its
// store first, which on a loaded machine can take more than a few seconds.
const readyTimeout = 30 * time.Second

// Options says where the server listens and stores.
type Options struct {
	// Listen is host:port; port -1 picks a free port.
	Listen string
	// StoreDir holds JetStream's file storage.
	StoreDir string
	// Logs turns on the server's own logging to stderr.
	Logs bool
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: port: %w", o.Listen, err)
	}
	opts := &server.Options{
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      !o.Logs,
		MaxPayload: maxPayload,
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
	return s, nil
}
