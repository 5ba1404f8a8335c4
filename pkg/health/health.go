// Package health serves what orchestrators ask a sluice process: /healthz
// (liveness: 200 while the process runs), /readyz (200 only while it is
// ready; the body says why or why not in one line) and /metrics (Prometheus
// text format from the process's own registry). Probe is the client side,
// for images without curl: `/entrypoint --probe http://127.0.0.1:PORT/readyz`.
// Entry points: Handler, State, Probe.
package health

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness reports whether a process is ready and why, in one line that
// starts with "ready: " or "not ready: ".
type Readiness func() (ok bool, why string)

// State is a readiness that a service sets as it starts and runs. The zero
// value is not ready, "starting". It is safe for concurrent use.
type State struct {
	mu  sync.Mutex
	ok  bool
	why string
}

// Set records whether the service is ready and why (without the "ready: "
// or "not ready: " prefix, which Get adds).
func (s *State) Set(ok bool, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ok, s.why = ok, why
}

// Get is the State as a Readiness.
func (s *State) Get() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	why := s.why
	if why == "" {
		why = "starting"
	}
	return s.ok, Line(s.ok, why)
}

// Line is why prefixed with "ready: " or "not ready: ".
func Line(ok bool, why string) string {
	if ok {
		return "ready: " + why
	}
	return "not ready: " + why
}

// Handler serves /healthz, /readyz (from ready) and /metrics (from reg).
func Handler(ready Readiness, reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok: running\n")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, oneLine(why)+"\n")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// oneLine keeps a reason on one line: an error may carry newlines.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ProbeTimeout bounds a probe's request.
const ProbeTimeout = 2 * time.Second

// Probe GETs url within ProbeTimeout, writes the body (or the error) to out
// and returns the exit code a container probe wants: 0 on 200, 1 otherwise.
func Probe(ctx context.Context, url string, out io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintf(out, "probe %s: %v\n", url, err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(out, "probe %s: %v\n", url, err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		fmt.Fprintf(out, "probe %s: reading the answer: %v\n", url, err)
		return 1
	}
	if s := strings.TrimRight(string(body), "\n"); s != "" {
		fmt.Fprintln(out, s)
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(out, "probe %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
