package natsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func startServer(t *testing.T, o *server.Options) string {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) { // margin: returns once it listens
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

func connect(t *testing.T, url string, o Options) error {
	t.Helper()
	opts, err := o.NATS()
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	// margin: a handshake takes milliseconds; the refused ones fail on the
	// credentials or certificate at once, not on this timeout.
	nc, err := nats.Connect(url, append(opts, nats.Timeout(10*time.Second))...)
	if err == nil {
		nc.Close()
	}
	return err
}

func write(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUserAndPasswordFile(t *testing.T) {
	url := startServer(t, &server.Options{Users: []*server.User{{Username: "sluice", Password: "s3cret"}}})
	dir := t.TempDir()
	if err := connect(t, url, Options{User: "sluice", PasswordFile: write(t, dir, "pw", "s3cret\n")}); err != nil {
		t.Fatalf("the right password (with a trailing newline in the file): %v", err)
	}
	err := connect(t, url, Options{User: "sluice", PasswordFile: write(t, dir, "bad", "guess")})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("a wrong password: %v; want an authorization error", err)
	}
}

func TestNKeySeedFile(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	url := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err := connect(t, url, Options{NKey: write(t, t.TempDir(), "user.nk", string(seed))}); err != nil {
		t.Fatalf("the user's seed: %v", err)
	}
}

// TestTLS_TrustsTheGivenCA: a client given the CA connects to a TLS server
// and verifies its certificate; without the CA the handshake fails; with a
// client certificate the server verifies the client.
func TestTLS_TrustsTheGivenCA(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caPEM := newCert(t, nil, nil, "sluice test CA", nil)
	srvCert, srvKey, _ := newCert(t, ca, caKey, "nats-1", []string{"nats-1", "127.0.0.1"})
	_, cliKey, cliPEM := newCert(t, ca, caKey, "node-01", nil)
	caFile := write(t, dir, "ca.pem", caPEM)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	serverTLS := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}},
		ClientCAs:    pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}
	url := startServer(t, &server.Options{TLSConfig: serverTLS, TLS: true, TLSVerify: true, TLSTimeout: 10})
	keyFile := write(t, dir, "node.key", keyPEM(t, cliKey))
	certFile := write(t, dir, "node.pem", cliPEM)

	if err := connect(t, url, Options{TLSCA: caFile, TLSCert: certFile, TLSKey: keyFile}); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	if err := connect(t, url, Options{TLSCert: certFile, TLSKey: keyFile}); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v; want a certificate verification error", err)
	}
	if err := connect(t, url, Options{TLSCA: caFile}); err == nil {
		t.Fatal("without a client certificate: connected; want the server to refuse it")
	}
	if err := connect(t, strings.Replace(url, "127.0.0.1", "localhost", 1), Options{TLSCA: caFile, TLSCert: certFile, TLSKey: keyFile, TLSServerName: "nats-1"}); err != nil {
		t.Fatalf("with --tls-server-name naming the certificate: %v", err)
	}
}

func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, hosts []string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func keyPEM(t *testing.T, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

func TestOptions_RefuseTwoIdentities(t *testing.T) {
	dir := t.TempDir()
	_, err := Options{Creds: write(t, dir, "a.creds", "x"), NKey: write(t, dir, "b.nk", "y")}.NATS()
	if err == nil || !strings.Contains(err.Error(), "alternatives") {
		t.Fatalf("creds and nkey together: %v; want them refused as alternatives", err)
	}
}
