package creds

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TLSFiles are the files TLS writes, in dir/tls.
type TLSFiles struct {
	CA, Cert, Key string
}

// TLS makes a local certificate authority in dir/tls (once: ca.pem and
// ca.key are kept) and a certificate for the NATS servers naming hosts
// (DNS names or IP addresses), valid for validity, written as server.pem
// and server.key. The certificate serves for client connections and for
// the cluster's routes (server and client auth). For a test or a compose
// stack on one machine; a production fleet's certificates come from its
// own PKI.
func TLS(dir string, hosts []string, validity time.Duration) (TLSFiles, error) {
	if len(hosts) == 0 {
		return TLSFiles{}, errors.New("--hosts: name at least one host the servers are reached by")
	}
	if validity <= 0 {
		return TLSFiles{}, fmt.Errorf("--valid-for %s: want a positive duration", validity)
	}
	d := filepath.Join(dir, "tls")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{CA: filepath.Join(d, "ca.pem"), Cert: filepath.Join(d, "server.pem"), Key: filepath.Join(d, "server.key")}
	ca, caKey, err := loadOrMakeCA(d)
	if err != nil {
		return TLSFiles{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TLSFiles{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0], Organization: []string{"sluice"}},
		NotBefore: time.Now().Add(-5 * time.Minute), NotAfter: time.Now().Add(validity),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("server certificate: %w", err)
	}
	if err := writePEM(f.Cert, "CERTIFICATE", der, 0o644); err != nil {
		return TLSFiles{}, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return TLSFiles{}, err
	}
	return f, writePEM(f.Key, "EC PRIVATE KEY", kb, 0o600)
}

// loadOrMakeCA reads dir/ca.pem and ca.key, making them (valid ten years)
// when missing.
func loadOrMakeCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	if cb, err := os.ReadFile(certFile); err == nil {
		kb, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%s exists but its key: %w", certFile, err)
		}
		cp, _ := pem.Decode(cb)
		kp, _ := pem.Decode(kb)
		if cp == nil || kp == nil {
			return nil, nil, fmt.Errorf("%s or %s: no PEM block", certFile, keyFile)
		}
		cert, err := x509.ParseCertificate(cp.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", certFile, err)
		}
		key, err := x509.ParseECPrivateKey(kp.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
		}
		return cert, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "sluice local CA", Organization: []string{"sluice"}},
		NotBefore: time.Now().Add(-5 * time.Minute), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(keyFile, "EC PRIVATE KEY", kb, 0o600); err != nil {
		return nil, nil, err
	}
	return cert, key, writePEM(certFile, "CERTIFICATE", der, 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
