package cmdutil

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
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

// boundAddr is a loopback address where nothing listens, for as long as the
// test runs: a socket bound to it, never listening, so connecting is
// refused and no other test's server can take the port meanwhile (a free
// port closed again was taken by a NATS server of another package once).
func boundAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// holdAddr keeps a loopback address for a server the test starts later:
// until release, it listens there and closes every connection at once, so
// a client finds no NATS, and no other process can take the port during
// the test's waits (as it could a port found free and closed). release
// hands the port over, to be listened on right away; it runs at cleanup too.
func holdAddr(t *testing.T) (addr string, release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = ln.Close()
			<-done
		})
	}
	t.Cleanup(release)
	return ln.Addr().String(), release
}

// servedAddr is the address Main's endpoint listens on, from its log line
// (it was started on port 0, so no other process can hold the port).
func servedAddr(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	var base string
	// margin: the poll ends as soon as Main logs the line, right after it listens.
	natstest.Eventually(t, 30*time.Second, "the endpoint to listen", func() bool {
		base = ServedAt(logs.String())
		return base != ""
	})
	return strings.TrimPrefix(base, "http://")
}

// get GETs url and returns the status code and body ("" and 0 when nothing answers).
func get(url string) (int, string) {
	c := http.Client{Timeout: 30 * time.Second} // margin: returns with the answer; only catches a hang
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
	natsAddr, release := holdAddr(t)
	var c Common
	fs := flag.NewFlagSet("sluice-test", flag.ContinueOnError)
	c.Register(fs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- c.Main(ctx, fs, []string{"--server", "nats://" + natsAddr, "--http-addr", "127.0.0.1:0"}, &logs, nil,
			func(rt Runtime) (Service, error) { return &fakeService{rt: rt, running: make(chan struct{})}, nil })
	}()
	base := "http://" + servedAddr(t, &logs)

	// margin: every poll below ends as soon as /readyz says it. Any attempt
	// will do: on a loaded machine the first poll may come after the
	// second attempt (a second after the first).
	natstest.Eventually(t, 30*time.Second, "/readyz to say NATS is not reachable yet", func() bool {
		st, body := get(base + "/readyz")
		return st == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: NATS not reachable yet (attempt ") &&
			strings.Contains(body, "): connect to NATS at nats://"+natsAddr)
	})
	if st, body := get(base + "/healthz"); st != http.StatusOK {
		t.Fatalf("/healthz while NATS is unreachable: %d %q, want 200", st, body)
	}
	// The first wait: 1 s with equal jitter (pkg/backoff), so 500-1000 ms.
	first := regexp.MustCompile(`"attempt":1,"retry_in":(\d+)`).FindStringSubmatch(logs.String())
	if first == nil || !strings.Contains(logs.String(), "NATS not reachable yet; retrying") {
		t.Fatalf("no log line for the first attempt with its error and wait:\n%s", logs.String())
	}
	if ms, _ := strconv.Atoi(first[1]); ms < 500 || ms > 1000 {
		t.Errorf("first retry_in %s ms, want 500-1000 (1 s, jittered)", first[1])
	}

	release()
	env := natstest.StartAt(t, t.TempDir(), natsAddr, contract.DefaultSettings())
	// The next attempt may be 1, 2, 4 or 8s away, after a slow server start.
	natstest.Eventually(t, 60*time.Second, "/readyz to be ready once NATS listens", func() bool {
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
	natstest.Eventually(t, 30*time.Second, "/readyz to say NATS is disconnected", func() bool {
		st, body := get(base + "/readyz")
		return st == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: NATS disconnected since ")
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d, want 0:\n%s", c, logs.String())
		}
	case <-time.After(30 * time.Second): // margin: Main returns at once; this only catches a hang
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
	natsAddr, _ := holdAddr(t)
	go func() {
		code <- c.Main(ctx, fs, []string{"--server", "nats://" + natsAddr}, &logs, nil,
			func(Runtime) (Service, error) { built <- struct{}{}; return nil, nil })
	}()
	// margin: the poll ends with the first attempt's log line.
	natstest.Eventually(t, 30*time.Second, "a failed attempt", func() bool { return strings.Contains(logs.String(), "NATS not reachable yet") })
	cancel()
	select {
	case c := <-code:
		if c != 0 || len(built) != 0 {
			t.Fatalf("exit code %d, built %v; want 0 and nothing built", c, len(built) != 0)
		}
	case <-time.After(30 * time.Second): // margin: Main returns at once; this only catches a hang
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
			<-r.Context().Done() // no answer before the probe gives up, however slow the machine
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
		{"no answer within the probe timeout", srv.URL + "/slow", 1, "context deadline exceeded"},
		{"nothing listening", "http://" + boundAddr(t) + "/readyz", 1, "connection refused"},
		{"not a URL", "::", 1, "probe ::"},
	}
	// margin: health.ProbeTimeout (2s) bounds the probes that answer too;
	// a loopback GET takes milliseconds.
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

func TestAgo_NeverZeroOrNegative(t *testing.T) {
	tests := []struct {
		given time.Duration
		want  string
	}{
		{-3 * time.Second, "just now"}, // a wall clock set back
		{0, "just now"},
		{400 * time.Millisecond, "just now"},
		{1400 * time.Millisecond, "1s ago"},
		{90 * time.Second, "1m30s ago"},
	}
	for _, tc := range tests {
		if got := ago(tc.given); got != tc.want {
			t.Errorf("ago(%s) = %q, want %q", tc.given, got, tc.want)
		}
	}
}
