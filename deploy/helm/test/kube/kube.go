// Package kube runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver, built from the Go module proxy once per machine by
// build.sh into a versioned cache directory, started on loopback with a
// generated service-account key and an administrator's token. No
// controllers run: nothing reconciles (no pods start, namespaces never
// finish deleting), so tests check what the API server accepts, stores and
// watches. Test-only.
package kube

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// EnvBin names a directory holding kube-apiserver and etcd to use instead
// of build.sh's cache.
const EnvBin = "SLUICE_KUBE_BIN"

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// Binaries is the directory holding kube-apiserver and etcd: $SLUICE_KUBE_BIN,
// or build.sh's cache (built on the first call on a machine, about 5
// minutes).
func Binaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if d := os.Getenv(EnvBin); d != "" {
			binDir = d
			return
		}
		_, self, _, _ := runtime.Caller(0)
		cmd := exec.Command(filepath.Join(filepath.Dir(self), "build.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			binErr = fmt.Errorf("build.sh: %w", err)
			return
		}
		binDir = strings.TrimSpace(string(out))
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return binDir
}

// Cluster is a running API server and its etcd.
type Cluster struct {
	// URL is the API server's https address on loopback.
	URL string
	// CAFile is the API server's self-signed serving certificate.
	CAFile string
	// Token is an administrator's bearer token (group system:masters).
	Token string
	dir   string
	stop  []func()
}

// Start starts etcd and kube-apiserver with their data under a fresh
// t.TempDir and waits until the API server is ready; t.Cleanup stops them
// (the API server first: stopping both at once has hung it).
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := Binaries(t)
	dir := t.TempDir()
	c := &Cluster{dir: dir, Token: randomHex(t)}
	t.Cleanup(c.Stop)

	etcdClient, etcdPeer := FreeAddr(t), FreeAddr(t)
	c.run(t, "etcd", filepath.Join(bin, "etcd"),
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://"+etcdClient, "--advertise-client-urls", "http://"+etcdClient,
		"--listen-peer-urls", "http://"+etcdPeer, "--initial-advertise-peer-urls", "http://"+etcdPeer,
		"--initial-cluster", "default=http://"+etcdPeer, "--log-level", "warn")

	key := filepath.Join(dir, "sa.key")
	writeKey(t, key)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.Token+",admin,admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	api := FreeAddr(t)
	_, port, _ := net.SplitHostPort(api)
	c.run(t, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", "http://"+etcdClient,
		"--bind-address", "127.0.0.1", "--secure-port", port,
		"--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--cert-dir", certDir,
		"--token-auth-file", tokens,
		"--authorization-mode", "RBAC",
		"--service-account-key-file", key, "--service-account-signing-key-file", key,
		"--service-account-issuer", "https://kubernetes.default.svc", "--api-audiences", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--storage-media-type", "application/json",
		// On SIGTERM the server drains its requests, and without a grace
		// for watches it waits on every open one (a configurator still
		// watching when a test stops the cluster) until Stop kills it 20 s
		// later: end them after 1 s instead.
		"--shutdown-watch-termination-grace-period", "1s")
	c.URL = "https://" + api
	c.CAFile = filepath.Join(certDir, "apiserver.crt")
	c.waitReady(t, 90*time.Second)
	return c
}

// run starts a process whose output goes to dir/<name>.log.
func (c *Cluster) run(t testing.TB, name, path string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	c.stop = append(c.stop, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// Stop stops the API server, then etcd.
func (c *Cluster) Stop() {
	for i := len(c.stop) - 1; i >= 0; i-- {
		c.stop[i]()
	}
	c.stop = nil
}

// Log is what a process of the cluster printed ("etcd", "kube-apiserver").
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	return string(b)
}

func (c *Cluster) waitReady(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var rc *http.Client
	last := "its serving certificate is not written yet"
	for time.Now().Before(deadline) {
		if rc == nil { // the server writes its self-signed certificate first
			if _, err := os.Stat(c.CAFile); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			var err error
			if rc, err = rest.HTTPClientFor(c.Config(c.Token)); err != nil {
				t.Fatal(err)
			}
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, c.URL+"/readyz", nil)
		resp, err := rc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("kube-apiserver not ready within %s (%s); its log:\n%s", within, last, tail(c.Log("kube-apiserver"), 40))
}

// Config is a client configuration that authenticates with token.
func (c *Cluster) Config(token string) *rest.Config {
	return &rest.Config{Host: c.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile}}
}

// Client is an administrator's client.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(c.Token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig that authenticates with token into a
// fresh file and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, c.URL, c.CAFile, token)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// FreeAddr is a free loopback host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func writeKey(t testing.TB, path string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
