package creds_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/natsauth"
)

// TestTLS_ServerCertificateFromTheLocalCA: a NATS server with the
// certificate TLS makes is trusted by a client given the CA, for each host
// named, and the CA is kept across calls.
func TestTLS_ServerCertificateFromTheLocalCA(t *testing.T) {
	dir := t.TempDir()
	f, err := creds.TLS(dir, []string{"nats-1", "127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: f.Cert, KeyFile: f.Key})
	if err != nil {
		t.Fatalf("the server loads its certificate: %v", err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, TLS: true, TLSConfig: tc, TLSTimeout: 10})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) { // margin: returns once it listens
		t.Fatal("server not ready")
	}
	defer s.Shutdown()
	connect := func(o natsauth.Options) error {
		opts, err := o.NATS()
		if err != nil {
			t.Fatal(err)
		}
		// margin: a handshake takes milliseconds; the refused ones fail on
		// the certificate at once, not on these timeouts.
		nc, err := nats.Connect(s.ClientURL(), append(opts, nats.Timeout(10*time.Second))...)
		if err == nil {
			nc.Close()
		}
		return err
	}
	if err := connect(natsauth.Options{TLSCA: f.CA}); err != nil {
		t.Fatalf("trusting the CA, by IP: %v", err)
	}
	if err := connect(natsauth.Options{}); err == nil || !strings.Contains(natsauth.ConnectHint(err), "--tls-ca (env SLUICE_NATS_TLS_CA)") {
		t.Fatalf("without the CA: %v, hint %q; want a hint naming --tls-ca", err, natsauth.ConnectHint(err))
	}
	if err := connect(natsauth.Options{TLSCA: f.CA, TLSServerName: "nats-1"}); err != nil {
		t.Fatalf("trusting the CA, by name: %v", err)
	}
	if err := connect(natsauth.Options{TLSCA: f.CA, TLSServerName: "nats-9"}); err == nil || !strings.Contains(err.Error(), "nats-9") {
		t.Fatalf("a name the certificate does not carry: %v; want it refused", err)
	}
	again, err := creds.TLS(dir, []string{"nats-2"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if again.CA != f.CA {
		t.Fatalf("CA moved from %s to %s", f.CA, again.CA)
	}
	if err := connect(natsauth.Options{TLSCA: f.CA}); err != nil {
		t.Fatalf("the first server, after a second certificate from the same CA: %v", err)
	}
}
