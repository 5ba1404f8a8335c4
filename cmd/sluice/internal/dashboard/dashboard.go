// Package dashboard serves sluice's fleet dashboard: a page (web/, embedded)
// and the JSON API under /api/v1 it uses. The server follows the buckets
// and the events stream once (follow.go; what each bucket's values mean:
// watched.go) into one state (state.go), checks the store for a loss
// (storecheck.go), and fans the changes out to every viewer over
// Server-Sent Events (stream.go); the API prints the objects of
// `sluice get … -o json` (package view); controls run the CLI's own
// commands (control.go), so that they go through the same control requests.
// It answers only requests that name it, and runs controls only from its
// own pages (hosts.go: DNS rebinding).
// Entry points: New, then Server.Serve or Server.Handler.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

//go:embed web
var webFiles embed.FS

// DefaultAddr is where the dashboard listens by default: loopback only.
const DefaultAddr = "127.0.0.1:3100"

// Off, as an address, disables the dashboard (sluice dev --dashboard-addr off).
const Off = "off"

// Runner runs `sluice ARGS` with the dashboard's own connection and
// credentials and returns what it printed: controls go through it.
type Runner func(ctx context.Context, args []string) (output string, err error)

// Options configure a dashboard.
type Options struct {
	// Addr is the listen address; a non-loopback one requires Token.
	Addr string
	// AllowedHosts are the names, NAME or NAME:PORT, the dashboard answers
	// to besides its own addresses and localhost (hosts.go): a reverse
	// proxy's. A request naming any other Host is refused (421).
	AllowedHosts []string
	// AllowedHostFlag names the flag AllowedHosts come from, for errors
	// (default "--allowed-host").
	AllowedHostFlag string
	// Token, when set, is required of every API request: as
	// "Authorization: Bearer TOKEN", or the cookie the page's login sets.
	Token string
	// JS reads the control plane.
	JS jetstream.JetStream
	// Run performs controls; nil disables them ("no controls here").
	Run Runner
	// Who names who the controls are run for (user@host and credentials):
	// every control run is recorded as an event naming it, with the
	// viewer's address. Default: "the dashboard".
	Who string
	// Readonly, when set, disables the controls and says why.
	Readonly string
	// GroupBy are the labels the fleet map groups nodes by, outermost first.
	GroupBy []string
	// Interval is the least time between two updates to one viewer (default 250ms).
	Interval time.Duration
	// StoreEvery is how often the store is checked for a loss and for
	// storage trouble (default 5s); a check costs no read in a store that
	// records a rollout.
	StoreEvery time.Duration
	// Logf logs what an operator should know (watch errors); nil discards.
	Logf func(format string, args ...any)
}

// Server is a running dashboard.
type Server struct {
	opts  Options
	hosts hosts
	// refused are the Hosts refused so far (logged once each).
	refusedMu sync.Mutex
	refused   map[string]struct{}
	state     *state
	run       string // names this run in the stream's event ids
	interval  time.Duration
	done      chan struct{}
	stopOnce  sync.Once
}

// ErrTokenRequired is New's error for a non-loopback address without a token.
var ErrTokenRequired = errors.New("a token is required")

// New checks opts and builds a server; it does no I/O.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.JS == nil {
		return nil, errors.New("dashboard: no JetStream connection")
	}
	loop, err := IsLoopback(opts.Addr)
	if err != nil {
		return nil, err
	}
	if !loop && opts.Token == "" {
		return nil, fmt.Errorf("--addr %s is not a loopback address: %w (--token-file FILE); anyone who reaches it would see the fleet", opts.Addr, ErrTokenRequired)
	}
	if opts.AllowedHostFlag == "" {
		opts.AllowedHostFlag = "--allowed-host"
	}
	hs, err := parseHosts(opts.AllowedHostFlag, opts.Addr, opts.AllowedHosts)
	if err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	if len(opts.GroupBy) == 0 {
		opts.GroupBy = []string{"zone", "rack"}
	}
	if opts.StoreEvery <= 0 {
		opts.StoreEvery = storeEvery
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	st := newState()
	st.groupBy = opts.GroupBy
	return &Server{
		opts: opts, hosts: hs, state: st, interval: opts.Interval, done: make(chan struct{}),
		run: strconv.FormatInt(time.Now().UnixNano(), 36),
	}, nil
}

// IsLoopback says whether a listen address (host:port) only listens on
// loopback: "127.0.0.1:3100", "[::1]:3100" and "localhost:3100" do;
// ":3100" (every interface) does not.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--addr %q: want host:port, such as %s: %w", addr, DefaultAddr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// Follow keeps the state current until ctx ends; Serve runs it.
func (srv *Server) Follow(ctx context.Context) {
	srv.state.follow(ctx, srv.opts.JS, srv.opts.StoreEvery, srv.opts.Logf)
}

// Serve listens on Addr (or uses ln when not nil), follows the control
// plane and serves until ctx ends.
func (srv *Server) Serve(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", srv.opts.Addr); err != nil {
			return fmt.Errorf("dashboard: listen on %s: %w", srv.opts.Addr, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.Follow(ctx)
	}()
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	srv.Stop()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = hs.Shutdown(sctx)
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Stop ends every stream; safe to call twice.
func (srv *Server) Stop() { srv.stopOnce.Do(func() { close(srv.done) }) }

// Handler serves the page and the API, each only to a request that names
// this server (guard, hosts.go).
func (srv *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFiles, "web")
	files := http.FileServerFS(static)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpError(w, http.StatusMethodNotAllowed, "", r.Method+" "+r.URL.Path+": the page's files are only read (GET)")
			return
		}
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /api/v1/config", srv.authed(srv.handleConfig))
	mux.Handle("GET /api/v1/fleet", gzipped(srv.authed(srv.handleFleet)))
	mux.Handle("GET /api/v1/rollouts", gzipped(srv.authed(srv.handleRollouts)))
	mux.Handle("GET /api/v1/rollouts/{id}", gzipped(srv.authed(srv.handleRollout)))
	mux.Handle("GET /api/v1/nodes/{name}", gzipped(srv.authed(srv.handleNode)))
	mux.Handle("GET /api/v1/stream", gzipped(srv.authed(srv.handleStream)))
	mux.HandleFunc("POST /api/v1/login", jsonBody(srv.handleLogin))
	mux.HandleFunc("POST /api/v1/control", jsonBody(srv.authed(srv.handleControl)))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, "", fmt.Sprintf("%s %s: no such API (docs/dashboard.md lists them)", r.Method, r.URL.Path))
	})
	return securityHeaders(srv.guard(mux))
}

// securityHeaders: no inline script, nothing from elsewhere, no framing.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		if strings.HasPrefix(r.URL.Path, "/api/") {
			hd.Set("Cache-Control", "no-store")
		}
		h.ServeHTTP(w, r)
	})
}
