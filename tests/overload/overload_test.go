//go:build overload

// Package overload checks that a slow JetStream does not make the fleet
// offer it more work: `make test-overload` (build tag overload; about three
// minutes, so make test leaves it out and .ci/run calls it).
package overload

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

const (
	agentsPerConn = 250              // as the bench's agents share connections
	slowBy        = 2 * time.Second  // every answer of JetStream this late
	slowFor       = 30 * time.Second // for this long
	window        = 30 * time.Second // the steady rate is measured over this
	recoverIn     = 10 * time.Second // the fleet is back to its steady rate after this
)

// TestSlowJetStream_FleetOffersNoMore runs 10,000 agents (OVERLOAD_AGENTS)
// at the default node lease (OVERLOAD_NODE_LEASE sets another) against one
// server, their connections through a proxy, and counts every request they
// offer JetStream per second — presence and status writes, API requests
// (reads, stream info), event publishes — on a connection of its own. Then
// the proxy holds every answer to the agents for 2 s, for 30 s. It asserts
// that the rate offered during the slowdown is not above the steady rate
// (no retry storm), that no presence expired, and that the rate 10 s after
// the slowdown is the steady rate again.
//
// The agents start spread over their longest period (the resync, 2
// minutes; a beat is 1), as a DaemonSet's pods do, and the rates are
// measured once every periodic request has come round at least once, so
// that the steady rate is steady: measured over a window where beats and
// resyncs are not yet uniform, a wave of first resyncs looks like a retry
// storm.
func TestSlowJetStream_FleetOffersNoMore(t *testing.T) {
	n := envInt(t, "OVERLOAD_AGENTS", 10000)
	settings := contract.DefaultSettings()
	if v := os.Getenv("OVERLOAD_NODE_LEASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OVERLOAD_NODE_LEASE=%q: %v", v, err)
		}
		settings.NodeLease = d
	}
	interval := settings.HeartbeatInterval()
	period := max(interval, agent.DefaultResyncInterval)
	env := natstest.Start(t, settings)
	u, err := url.Parse(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now()
	offered := newPerSecond(t0)
	watcher := env.Connect(t)
	for _, subj := range []string{"$KV.>", "$JS.API.>", contract.EventsSubjectPrefix + ".>"} {
		if _, err := watcher.Subscribe(subj, func(*nats.Msg) { offered.add(time.Now()) }); err != nil {
			t.Fatal(err)
		}
	}
	nodes := store.New(env.Buckets.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	var lost atomic.Int64
	w, err := nodes.WatchKeys(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for e := range w {
			if e.Deleted {
				lost.Add(1)
			}
		}
	}()
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}

	// Agents: started one every period/n.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var conn *nats.Conn
	var js jetstream.JetStream
	var bound *buckets.Set
	for i := range n {
		if i%agentsPerConn == 0 {
			conn, err = nats.Connect("nats://"+proxy.addr(), nats.MaxReconnects(-1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(conn.Close)
			if js, err = jetstream.New(conn); err != nil {
				t.Fatal(err)
			}
			if bound, err = buckets.BindAll(ctx, js); err != nil {
				t.Fatal(err)
			}
		}
		name := fmt.Sprintf("node-%05d", i)
		a, err := agent.New(agent.Config{Conn: conn, JetStream: js, Buckets: bound, Settings: settings, Log: zerolog.Nop(),
			Node: name, Version: "overload", Labels: map[string]string{"zone": fmt.Sprintf("zone-%c", 'a'+i%3)},
			Applier: agent.ApplierFunc(func(context.Context, *sluicev1.DesiredConfig) error { return nil })})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = a.Run(ctx) })
		time.Sleep(time.Until(t0.Add(time.Duration(i+1) * period / time.Duration(n))))
	}
	natstest.Eventually(t, 2*time.Minute, fmt.Sprintf("%d agents to register", n), func() bool {
		keys, err := nodes.Keys(ctx)
		return err == nil && len(keys) >= n
	})
	t.Logf("%d agents started over %s (node lease %s, a beat every %s, a resync every %s) and registered %s after the first",
		n, period, settings.NodeLease, interval, agent.DefaultResyncInterval, time.Since(t0).Round(time.Second))

	// Steady, then slow, then recovered. Every agent's first beat and first
	// resync come at most period + 10% (their jitter) after its start.
	probe := prober(t, proxy)
	time.Sleep(time.Until(t0.Add(period * 11 / 10).Add(5 * time.Second)))
	steadyFrom := time.Now()
	time.Sleep(window)
	slowFrom := time.Now()
	proxy.slow(slowBy)
	probeTook := probe()
	time.Sleep(time.Until(slowFrom.Add(slowFor)))
	proxy.slow(0)
	slowTo := time.Now()
	time.Sleep(recoverIn + window/3)

	steady := offered.rate(steadyFrom, slowFrom)
	slow := offered.rate(slowFrom, slowTo)
	after := offered.rate(slowTo.Add(recoverIn), slowTo.Add(recoverIn+window/3))
	beats := float64(n) / interval.Seconds()
	expected := beats + 2*float64(n)/agent.DefaultResyncInterval.Seconds() // a resync reads the desired config and the pause
	t.Logf("requests offered per second: steady %.0f (beats and resyncs should be %.0f), during the %s slowdown of %s %.0f (ratio %.2f), %s after it %.0f (ratio %.2f); "+
		"a read through the proxy took %s during the slowdown; presences expired: %d",
		steady, expected, slowFor, slowBy, slow, slow/steady, recoverIn, after, after/steady, probeTook.Round(time.Millisecond), lost.Load())

	if probeTook < slowBy {
		t.Fatalf("a read through the proxy took %s during the slowdown, want at least %s: the proxy did not slow JetStream", probeTook, slowBy)
	}
	if steady < expected*0.7 || steady > expected*1.3 {
		t.Fatalf("steady rate %.0f/s, want the %.0f/s of beats and resyncs (±30%%): the fleet is not what the test assumes", steady, expected)
	}
	if slow > steady*1.1 {
		t.Errorf("the fleet offered %.0f requests/s while JetStream answered %s late, %.2f × its steady %.0f/s: retries amplify the overload", slow, slowBy, slow/steady, steady)
	}
	if l := lost.Load(); l != 0 {
		t.Errorf("%d presences expired during the test; want none", l)
	}
	if after < steady*0.75 || after > steady*1.25 {
		t.Errorf("%s after the slowdown the fleet offered %.0f requests/s, want its steady %.0f/s (±25%%)", recoverIn, after, steady)
	}
}

// prober times one read made through the proxy, on a connection of its
// own made before the slowdown (a connection's handshake would time out
// during it).
func prober(t *testing.T, p *slowProxy) func() time.Duration {
	t.Helper()
	nc, err := nats.Connect("nats://" + p.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), contract.BucketNodes)
	if err != nil {
		t.Fatalf("probe through the proxy: %v", err)
	}
	return func() time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := kv.Get(ctx, "node-00000"); err != nil {
			t.Fatalf("probe through the proxy: %v", err)
		}
		return time.Since(start)
	}
}

// perSecond counts events by the second since t0.
type perSecond struct {
	t0     time.Time
	mu     sync.Mutex
	counts map[int]int
}

func newPerSecond(t0 time.Time) *perSecond { return &perSecond{t0: t0, counts: map[int]int{}} }

func (p *perSecond) add(at time.Time) {
	p.mu.Lock()
	p.counts[int(at.Sub(p.t0)/time.Second)]++
	p.mu.Unlock()
}

// rate is the mean count per second over the whole seconds in [from, to).
func (p *perSecond) rate(from, to time.Time) float64 {
	a, b := int(from.Sub(p.t0)/time.Second)+1, int(to.Sub(p.t0)/time.Second)
	if b <= a {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sum := 0
	for s := a; s < b; s++ {
		sum += p.counts[s]
	}
	return float64(sum) / float64(b-a)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
