package cmdutil

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// freeAddr is a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// get GETs url and returns the status code and body ("" and 0 when nothing answers).
func get(url string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// syncBuffer is a log destination the service's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeService is ready once Run started, and makes one write that loses
// its compare-and-set, to be counted.
type fakeService struct {
	rt      Runtime
	running chan struct{}
}

func (f *fakeService) Run(ctx context.Context) error {
	js, err := jetstream.New(f.rt.Conn)
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, contract.BucketStatus)
	if err != nil {
		return err
	}
	st := store.New(kv, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	_, _ = st.Create(ctx, "fake", &sluicev1.NodeStatus{Node: "fake"})
	_, _ = st.Create(ctx, "fake", &sluicev1.NodeStatus{Node: "fake"}) // a conflict
	close(f.running)
	<-ctx.Done()
	return nil
}

func (f *fakeService) Ready() (bool, string) {
	select {
	case <-f.running:
		return true, "ready: fake running"
	default:
		return false, "not ready: fake starting"
	}
}

func TestMain_RetriesNATSUntilItListens_ServingHealthMeanwhile(t *testing.T) {
	natsAddr, httpAddr := freeAddr(t), freeAddr(t)
	base := "http://" + httpAddr
	var c Common
	fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
	c.Register(fs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- c.Main(ctx, fs, []string{"--server", "nats://" + natsAddr, "--http-addr", httpAddr}, &logs, nil,
			func(rt Runtime) (Service, error) { return &fakeService{rt: rt, running: make(chan struct{})}, nil })
	}()

	natstest.Eventually(t, 5*time.Second, "/readyz to say NATS is not reachable yet", func() bool {
		st, body := get(base + "/readyz")
		return st == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: NATS not reachable yet (attempt 1): connect to NATS at nats://"+natsAddr)
	})
	if st, body := get(base + "/healthz"); st != http.StatusOK {
		t.Fatalf("/healthz while NATS is unreachable: %d %q, want 200", st, body)
	}
	if !strings.Contains(logs.String(), `"attempt":1`) || !strings.Contains(logs.String(), `"retry_in":1000`) ||
		!strings.Contains(logs.String(), "NATS not reachable yet; retrying") {
		t.Fatalf("no log line for the first attempt with its error and wait:\n%s", logs.String())
	}

	env := natstest.StartAt(t, t.TempDir(), natsAddr, contract.DefaultSettings())
	natstest.Eventually(t, 10*time.Second, "/readyz to be ready once NATS listens", func() bool {
		st, body := get(base + "/readyz")
		return st == http.StatusOK && body == "ready: fake running\n"
	})
	_, metrics := get(base + "/metrics")
	for _, want := range []string{
		`sluice_kv_write_failures_total{bucket="sluice-status",kind="conflict"} 1`,
		`sluice_nats_connected 1`,
		`sluice_build_info{version="dev"} 1`,
		`go_goroutines `,
		`process_start_time_seconds `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}

	env.Server.Shutdown()
	natstest.Eventually(t, 10*time.Second, "/readyz to say NATS is disconnected", func() bool {
		st, body := get(base + "/readyz")
		return st == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: NATS disconnected since ")
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0:\n%s", c, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Main did not return after cancel")
	}
	if st, _ := get(base + "/healthz"); st != 0 {
		t.Fatalf("/healthz still answers (%d) after Main returned", st)
	}
}

func TestMain_StopWhileWaitingForNATS_ExitsZeroWithoutBuilding(t *testing.T) {
	var c Common
	fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
	c.Register(fs)
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	code := make(chan int, 1)
	built := make(chan struct{}, 1)
	go func() {
		code <- c.Main(ctx, fs, []string{"--server", "nats://" + freeAddr(t)}, &logs, nil,
			func(Runtime) (Service, error) { built <- struct{}{}; return nil, nil })
	}()
	natstest.Eventually(t, 5*time.Second, "a failed attempt", func() bool { return strings.Contains(logs.String(), "NATS not reachable yet") })
	cancel()
	select {
	case c := <-code:
		if c != 0 || len(built) != 0 {
			t.Fatalf("exit code %d, built %v; want 0 and nothing built", c, len(built) != 0)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Main kept waiting for NATS after cancel")
	}
}

func TestMain_HTTPAddrTaken_Exits1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var c Common
	fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
	c.Register(fs)
	var logs syncBuffer
	code := c.Main(context.Background(), fs, []string{"--http-addr", ln.Addr().String()}, &logs, nil,
		func(Runtime) (Service, error) { return nil, nil })
	if code != 1 || !strings.Contains(logs.String(), "--http-addr "+ln.Addr().String()) {
		t.Fatalf("exit code %d, want 1 naming the flag:\n%s", code, logs.String())
	}
}

func TestProbe_ExitCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, "ready: leading term 7\n")
		case "/slow":
			time.Sleep(3 * time.Second)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: NATS disconnected\n")
		}
	}))
	defer srv.Close()
	tests := []struct {
		name, url string
		want      int
		wantOut   string
	}{
		{"200", srv.URL + "/ok", 0, "ready: leading term 7\n"},
		{"503", srv.URL + "/no", 1, "not ready: NATS disconnected\nprobe " + srv.URL + "/no: 503 Service Unavailable\n"},
		{"slower than 2s", srv.URL + "/slow", 1, "context deadline exceeded"},
		{"nothing listening", "http://" + freeAddr(t) + "/readyz", 1, "connection refused"},
		{"not a URL", "::", 1, "probe ::"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Through Main, as an image's probe runs it; other flags and
			// the environment do not matter.
			t.Setenv(EnvReplicas, "not a number")
			var c Common
			fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
			c.Register(fs)
			var out bytes.Buffer
			code := c.Main(context.Background(), fs, []string{"--probe", tc.url}, &out, nil,
				func(Runtime) (Service, error) { t.Fatal("probe built the service"); return nil, nil })
			if code != tc.want || !strings.Contains(out.String(), tc.wantOut) {
				t.Fatalf("exit %d, output %q; want %d and %q", code, out.String(), tc.want, tc.wantOut)
			}
		})
	}
}

func TestHTTPAddr_FromEnvUnlessTheFlagIsGiven(t *testing.T) {
	tests := []struct {
		name, env string
		args      []string
		want      string
	}{
		{name: "off by default"},
		{name: "env", env: "127.0.0.1:9090", want: "127.0.0.1:9090"},
		{name: "flag beats env", env: "127.0.0.1:9090", args: []string{"--http-addr", ":9191"}, want: ":9191"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvHTTPAddr, tc.env)
			var c Common
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.Register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if c.HTTPAddr != tc.want {
				t.Fatalf("HTTPAddr %q, want %q", c.HTTPAddr, tc.want)
			}
		})
	}
}
