package cmdutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/health"
	"github.com/sluicehq/sluice/pkg/natsauth"
	"github.com/sluicehq/sluice/pkg/store"
)

// Version is the build version of every sluice binary, set by `make build`
// with -ldflags "-X github.com/sluicehq/sluice/pkg/cmdutil.Version=…" (git
// describe); "dev" in a plain go build. Services announce it in their
// instance presence and micro service (as contract.ServiceVersion).
var Version = "dev"

// connectRetry: 1 s to 30 s: a fleet of services started before NATS must not hammer it, and one started after it waits little.
var connectRetry = backoff.Policy{Base: time.Second, Cap: 30 * time.Second}

// reconnectRetry: 1 s to 10 s between rounds over the servers: a lost server is dialled less often, a restarted one is back within seconds.
var reconnectRetry = backoff.Policy{Base: time.Second, Cap: 10 * time.Second}

// A connection pings the server every pingInterval and gives it up as dead
// after maxPingsOut unanswered pings, then reconnects: a connection whose
// path broke silently (a partition, a NAT or load balancer that dropped it,
// the peer's address changed) is noticed within about 45 s instead of
// nats.go's default 2 min × 2. An agent that does not notice keeps a lease
// it can no longer renew and misses its desired config until it does.
const (
	pingInterval = 15 * time.Second
	maxPingsOut  = 3
)

// Process is the side of a running service binary that is not the service:
// its health and metrics endpoint (--http-addr) and its NATS connection.
type Process struct {
	// Conn is the connection to NATS, set once Start connected.
	Conn *nats.Conn
	// Registry holds the process's metrics, served at /metrics: the Go and
	// process collectors, sluice_build_info, sluice_nats_connected,
	// sluice_kv_write_failures_total, and whatever the service registers.
	Registry *prometheus.Registry

	log        zerolog.Logger
	srv        *http.Server
	served     chan struct{}
	connecting health.State // until Conn is set
	conn       atomic.Pointer[nats.Conn]
	lostAt     atomic.Int64 // unix nanos of the last disconnect
	ready      atomic.Pointer[health.Readiness]
	failures   *prometheus.CounterVec
}

// Start serves /healthz, /readyz and /metrics on --http-addr (when set) and
// connects to NATS as name, retrying with backoff until it connects or ctx
// ends (then it returns ctx's error: a SIGTERM while NATS is unreachable is
// a clean stop). /healthz answers from the start; /readyz says "not ready"
// with the last attempt's error until connected, then asks NATS and the
// service (SetReadiness). Close the Process when done.
func (c *Common) Start(ctx context.Context, name string, log zerolog.Logger) (*Process, error) {
	p := newProcess(log)
	if c.HTTPAddr != "" {
		ln, err := net.Listen("tcp", c.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("--http-addr %s: %w", c.HTTPAddr, err)
		}
		p.srv = &http.Server{Handler: health.Handler(p.Ready, p.Registry), ReadHeaderTimeout: 5 * time.Second}
		p.served = make(chan struct{})
		go func() {
			defer close(p.served)
			if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error().Err(err).Str("addr", c.HTTPAddr).Msg("health and metrics endpoint stopped")
			}
		}()
		log.Info().Str("addr", ln.Addr().String()).Msg(msgServing)
	}
	// Every failed KV write of this process counts (one service per process).
	store.SetWriteObserver(p)
	nc, err := c.connect(ctx, name, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.Conn = nc
	p.conn.Store(nc)
	return p, nil
}

func newProcess(log zerolog.Logger) *Process {
	p := &Process{log: log, Registry: prometheus.NewRegistry()}
	p.connecting.Set(false, "connecting to NATS")
	p.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_kv_write_failures_total",
		Help: "KV writes of this process that failed, by bucket and kind: conflict (a compare-and-set lost; the writer re-reads) or error (timeout, refusal: the write may or may not have landed).",
	}, []string{"bucket", "kind"})
	p.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		p.failures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_nats_connected", Help: "1 while the process is connected to NATS, else 0.",
		}, func() float64 {
			if nc := p.conn.Load(); nc != nil && nc.IsConnected() {
				return 1
			}
			return 0
		}),
	)
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_build_info", Help: "Always 1; the label is the build version (cmdutil.Version).",
	}, []string{"version"})
	build.WithLabelValues(Version).Set(1)
	p.Registry.MustRegister(build)
	return p
}

// WriteFailed counts a failed KV write (store.WriteObserver).
func (p *Process) WriteFailed(bucket, kind string) { p.failures.WithLabelValues(bucket, kind).Inc() }

// SetReadiness makes ready the service's part of /readyz, asked while NATS
// is connected.
func (p *Process) SetReadiness(ready health.Readiness) { p.ready.Store(&ready) }

// Ready is the process's readiness: not while connecting or disconnected
// from NATS, else the service's (SetReadiness).
func (p *Process) Ready() (bool, string) {
	nc := p.conn.Load()
	if nc == nil {
		return p.connecting.Get()
	}
	if !nc.IsConnected() {
		why := "NATS disconnected"
		if at := p.lostAt.Load(); at != 0 {
			t := time.Unix(0, at)
			why += fmt.Sprintf(" since %s (%s)", t.UTC().Format(time.RFC3339), ago(time.Since(t)))
		}
		return false, health.Line(false, why)
	}
	if se, since := store.StorageTrouble(); se != nil {
		// The service's own readiness cannot say more while its writes
		// are refused: nothing it decides can be stored.
		return false, health.Line(false, fmt.Sprintf("writes refused since %s (%s): %v", since.UTC().Format(time.RFC3339), ago(time.Since(since)), se))
	}
	if r := p.ready.Load(); r != nil {
		return (*r)()
	}
	return true, health.Line(true, "connected to NATS")
}

// msgServing is the log line that says where the endpoint listens.
const msgServing = "serving /healthz, /readyz and /metrics"

// ServedAt is the base URL ("http://127.0.0.1:40123") a process's JSON
// log, logs, says its /healthz, /readyz and /metrics endpoint listens at,
// or "" until it says: how a test (or a wrapper) finds an endpoint started
// with --http-addr 127.0.0.1:0.
func ServedAt(logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		var entry struct{ Message, Addr string }
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Message == msgServing && entry.Addr != "" {
			return "http://" + entry.Addr
		}
	}
	return ""
}

// ago says how long ago something happened, d before now. Under a second
// (or "before now" on a wall clock that was set back) it says "just now",
// never "0s ago" or a negative duration.
func ago(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

// Close closes the connection, stops the endpoint and stops counting KV
// write failures. It is safe to call twice.
func (p *Process) Close() {
	if nc := p.conn.Load(); nc != nil {
		nc.Close()
	}
	if p.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		<-p.served
	}
	store.SetWriteObserver(nil)
}

// connect connects as name, retrying with backoff (1s doubling to 30s, a
// log line per attempt with the error and the next wait) until NATS
// answers or ctx ends.
//
// Why not nats.RetryOnFailedConnect: with it nats.Connect returns at once
// a connection that is not connected yet and keeps dialling in the
// background every ReconnectWait. The service would start on a connection
// that is not there — binding its buckets would fail with timeouts that
// look like a broken server —, the wait could not grow, and the attempts'
// errors would reach only a ReconnectErrHandler. Looping here, a service
// starts only on a live connection, every attempt says what failed, /readyz
// says which attempt failed how, and ctx (SIGTERM) ends the wait at once.
// Once connected, the connection reconnects by itself forever
// (MaxReconnects(-1)): a service outlives NATS restarts. Its reconnect
// attempts back off too (reconnectRetry), so that a fleet that lost its
// server does not dial it in lockstep every second for as long as it is down.
func (c *Common) connect(ctx context.Context, name string, p *Process) (*nats.Conn, error) {
	auth, err := c.Auth.NATS()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{
		nats.Name(name), nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return reconnectRetry.Delay(attempts - 1) }),
		nats.PingInterval(pingInterval), nats.MaxPingsOutstanding(maxPingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, _ error) { p.lostAt.Store(time.Now().UnixNano()) }),
		// A permission the server refuses is a deployment error (wrong
		// credentials for the role): say it loudly, once per refusal.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if natsauth.IsPermissionViolation(err) {
				p.log.Error().Err(err).Msg("NATS refused a permission: are these credentials issued for this component's role?")
				return
			}
			p.log.Warn().Err(err).Msg("NATS reported an error")
		}),
	}, auth...)
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	p.log.Info().Str("server", c.Server).Str("auth", c.Auth.Describe()).Msg("connecting to NATS")
	retry := backoff.New(connectRetry)
	for attempt := 1; ; attempt++ {
		nc, err := nats.Connect(c.Server, opts...)
		if err == nil {
			if attempt > 1 {
				p.log.Info().Int("attempt", attempt).Str("server", c.Server).Msg("connected to NATS")
			}
			return nc, nil
		}
		err = fmt.Errorf("connect to NATS at %s: %w", c.Server, err)
		p.connecting.Set(false, fmt.Sprintf("NATS not reachable yet (attempt %d): %v", attempt, err))
		wait := retry.Next()
		p.log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).Msg("NATS not reachable yet; retrying")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
