package dev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/pkg/health"
)

// readier is one service or agent's readiness, by name.
type readier struct {
	name  string
	ready func() (bool, string)
}

// newRegistry is the registry of the system's /metrics: the services' and
// the agents' metrics, and the process's own (Go runtime, process).
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ready is the system's readiness: every service and agent ready, else
// the first that is not, and why.
func (s *System) ready() (bool, string) {
	for _, r := range s.readies {
		if ok, why := r.ready(); !ok {
			return false, health.Line(false, r.name+": "+strings.TrimPrefix(why, "not ready: "))
		}
	}
	return true, health.Line(true, fmt.Sprintf("%d services and %d agents", len(s.readies)-len(s.nodes), len(s.nodes)))
}

// serveHTTP serves /healthz, /readyz and /metrics on addr until ctx ends.
func (s *System) serveHTTP(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w (pick another address, or leave it out)", addr, err)
	}
	s.httpAddr = ln.Addr().String()
	srv := &http.Server{Handler: health.Handler(s.ready, s.metrics), ReadHeaderTimeout: 5 * time.Second}
	s.run(ctx, "http", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return nil
}
