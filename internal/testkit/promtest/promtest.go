// Package promtest runs a real Prometheus for tests: Start launches the
// prometheus binary on a loopback address with a config written to
// t.TempDir (a short scrape and rule-evaluation interval, the targets and
// alerting rules the test gives) and kills it at cleanup; Stop and Restart
// take it away and bring it back on the same address, so a test can cut
// Prometheus off in the middle of what it tests. Exporter is a tiny
// /metrics endpoint whose values the test sets.
//
// The prometheus binary comes from Debian's prometheus package (apt-get
// install prometheus, or: make promtool). A test that needs it fails when
// it is missing; it never skips.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/testaddr"
	"github.com/sluicehq/sluice/internal/testkit/testproc"
)

// Binary is the Prometheus program Start runs, looked up on PATH.
const Binary = "prometheus"

// startTimeout bounds a start; it ends as soon as the server is ready, so
// it can be long enough for a loaded machine.
const startTimeout = 60 * time.Second

// Option changes how Start runs the server.
type Option func(*config)

type config struct {
	targets  []string
	rules    string
	interval time.Duration
}

// Scrape has the server scrape /metrics of each host:port.
func Scrape(addrs ...string) Option {
	return func(c *config) { c.targets = append(c.targets, addrs...) }
}

// Rules gives the server a rule file: YAML of rule groups ("groups: …").
func Rules(yaml string) Option { return func(c *config) { c.rules = yaml } }

// Interval sets the scrape and rule-evaluation interval (default 1s).
func Interval(d time.Duration) Option { return func(c *config) { c.interval = d } }

// Server is a running (or stopped) prometheus.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	addr string
	cfg  config

	run testproc.Slot
}

// Start starts prometheus on a loopback address held for the test, its
// config and storage in t.TempDir, waits until it is ready and registers
// its end with t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		t.Fatalf("promtest: %s not found on PATH (%v): these tests run a real Prometheus; "+
			"install it with apt-get install prometheus, or: make promtool", Binary, err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), addr: testaddr.Held(t), cfg: config{interval: time.Second}}
	for _, o := range opts {
		o(&s.cfg)
	}
	if err := s.writeConfig(); err != nil {
		t.Fatalf("promtest: %v", err)
	}
	t.Cleanup(s.Stop)
	if err := s.start(); err != nil {
		t.Fatalf("promtest: %v", err)
	}
	return s
}

// URL is the base URL of the server's HTTP API: http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.addr }

// Stop kills the server, as a crash would; its address stays held for
// Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.run.Stop() }

// Restart starts a stopped server again on the same address and storage.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.run.Restart("promtest", s.addr, s.start); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Server) writeConfig() error {
	iv := s.cfg.interval.String()
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\n", iv, iv)
	if s.cfg.rules != "" {
		if err := os.WriteFile(filepath.Join(s.dir, "rules.yaml"), []byte(s.cfg.rules), 0o600); err != nil {
			return err
		}
		b.WriteString("rule_files: [rules.yaml]\n")
	}
	b.WriteString("scrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: [")
	for i, a := range s.cfg.targets {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(a))
	}
	b.WriteString("]\n")
	return os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), []byte(b.String()), 0o600)
}

// start runs prometheus and waits until /-/ready answers 200.
func (s *Server) start() error {
	args := []string{
		"--config.file=" + filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(s.dir, "data"),
		"--web.listen-address=" + s.addr,
		"--log.level=warn",
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	p, err := testproc.Start(cmd)
	if err != nil {
		return err
	}
	if err := s.waitReady(p); err != nil {
		p.Kill()
		return fmt.Errorf("prometheus on %s: %w\n--- prometheus output ---\n%s", s.addr, err, p.Output())
	}
	s.run.Set(p)
	return nil
}

func (s *Server) waitReady(p *testproc.Process) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(s.URL() + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/-/ready: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", startTimeout, err)
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("exited before it was ready (%v)", p.State())
		case <-tick.C:
		}
	}
}

// WaitFor polls the instant query q until it returns at least one series,
// failing the test after timeout: for a test to start once Prometheus has
// scraped what it needs.
func (s *Server) WaitFor(q string, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := s.series(q)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("promtest: query %q returned no series within %s (last error: %v)", q, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) series(q string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("%s", body.Error)
	}
	return len(body.Data.Result), nil
}

// Exporter serves /metrics in Prometheus's text format with the values a
// test sets; it stops at cleanup.
type Exporter struct {
	mu     sync.Mutex
	values map[string]float64
	srv    *httptest.Server
}

// NewExporter starts an exporter with no series.
func NewExporter(t testing.TB) *Exporter {
	e := &Exporter{values: map[string]float64{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		names := make([]string, 0, len(e.values))
		for n := range e.values {
			names = append(names, n)
		}
		slices.Sort(names)
		var b bytes.Buffer
		for _, n := range names {
			fmt.Fprintf(&b, "%s %s\n", n, strconv.FormatFloat(e.values[n], 'g', -1, 64))
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(b.Bytes())
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// Addr is the exporter's host:port, for Scrape.
func (e *Exporter) Addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// Set sets a series, `name` or `name{label="value"}`, to v.
func (e *Exporter) Set(series string, v float64) {
	e.mu.Lock()
	e.values[series] = v
	e.mu.Unlock()
}

// Delete stops serving a series: Prometheus marks it stale at its next scrape.
func (e *Exporter) Delete(series string) {
	e.mu.Lock()
	delete(e.values, series)
	e.mu.Unlock()
}
