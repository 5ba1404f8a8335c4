package gittest

import (
	"encoding/pem"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// HTTPBackend is Debian's git http-backend, the CGI program Serve runs.
const HTTPBackend = "/usr/lib/git-core/git-http-backend"

// Server serves a Repo's bare repository over HTTP on loopback with git
// http-backend (the smart protocol, as a Git host speaks it).
type Server struct {
	// URL is the repository's clone URL: http(s)://127.0.0.1:PORT/intents.git.
	URL string
	srv *httptest.Server
	// Requests counts the requests served, refused ones too.
	Requests atomic.Int64
}

// ServeOptions say how Serve serves.
type ServeOptions struct {
	// TLS serves https:// with a certificate of its own (Server.CAFile).
	TLS bool
	// Token, when set, is required as the password of HTTP basic auth
	// (any user): a request without it is answered 401, as a Git host does.
	Token string
}

// Serve serves g's bare repository until the test ends or Stop.
func (g *Repo) Serve(opts ServeOptions) *Server {
	g.t.Helper()
	if _, err := os.Stat(HTTPBackend); err != nil {
		g.t.Fatalf("this test needs git http-backend (apt-get install git): %v", err)
	}
	s := &Server{}
	backend := &cgi.Handler{Path: HTTPBackend, Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(g.Bare), "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Requests.Add(1)
		if opts.Token != "" {
			if _, pw, ok := r.BasicAuth(); !ok || pw != opts.Token {
				w.Header().Set("WWW-Authenticate", `Basic realm="sluice test"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		backend.ServeHTTP(w, r)
	})
	if opts.TLS {
		s.srv = httptest.NewTLSServer(h)
	} else {
		s.srv = httptest.NewServer(h)
	}
	g.t.Cleanup(s.srv.Close)
	s.URL = s.srv.URL + "/" + filepath.Base(g.Bare)
	return s
}

// Stop stops the server: its port refuses connections from now on.
func (s *Server) Stop() { s.srv.Close() }

// CAFile writes the server's certificate (its own CA) as PEM to a file in
// dir and returns its path; for a TLS server only.
func (s *Server) CAFile(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "git-ca.pem")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
