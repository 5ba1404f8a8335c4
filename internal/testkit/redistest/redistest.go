// Package redistest runs a real redis-server for tests: Start launches one
// on a loopback port with its data in t.TempDir and kills it at cleanup;
// Stop and Restart take it away and bring it back on the same port, so a
// test can cut Redis off in the middle of what it tests.
//
// The redis-server binary comes from the Debian package of that name
// (apt-get install redis-server, or: make redis). A test that needs it
// fails when it is missing; it never skips.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/sluicehq/sluice/internal/testkit/testproc"
)

// Binary is the redis-server program Start runs, looked up on PATH.
const Binary = "redis-server"

const (
	// startTimeout bounds a start; it ends as soon as the server answers,
	// so it can be long enough for a loaded machine.
	startTimeout  = 30 * time.Second
	portAttempts  = 5
	addrInUseText = "Address already in use"
)

// Option changes how Start runs the server.
type Option func(*config)

type config struct {
	notify    string
	notifySet bool
	password  string
}

// WithNotifyKeyspaceEvents starts the server with --notify-keyspace-events
// flags, for example "KEA" to publish every keyspace and keyevent
// notification. Without it the server's default applies: none.
func WithNotifyKeyspaceEvents(flags string) Option {
	return func(c *config) { c.notify, c.notifySet = flags, true }
}

// WithPassword starts the server with --requirepass password. Client
// authenticates with it.
func WithPassword(password string) Option {
	return func(c *config) { c.password = password }
}

// Server is a running (or stopped) redis-server.
type Server struct {
	t    testing.TB
	bin  string
	cfg  config
	dir  string
	port int // kept across Stop, so Restart comes back at the same address

	run testproc.Slot

	mu     sync.Mutex // guards client
	client *redis.Client
}

// Start starts a redis-server bound to 127.0.0.1 on a free port, with no
// persistence (--save "", --appendonly no) and its directory in t.TempDir,
// waits until it answers PING and registers its end with t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (%v): these tests run a real Redis; "+
			"install it with apt-get install redis-server, or: make redis", Binary, err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	for _, o := range opts {
		o(&s.cfg)
	}
	t.Cleanup(func() {
		s.Stop()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.client != nil {
			_ = s.client.Close()
		}
	})

	// The port is chosen by letting the kernel pick a free one and
	// releasing it for redis-server, so another process can take it in
	// between: try again with another port when that happens.
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's address as a redis:// URL of database 0, without
// the password.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client is a go-redis client of database 0, authenticated when the server
// has a password, closed at cleanup. It outlives Stop and Restart: a
// command fails while the server is stopped and works after Restart.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		opts := clientOptions(s.Addr(), s.cfg.password)
		// After PoolSize failed dials go-redis answers the last dial error
		// without dialling, until a probe once a second succeeds: a test
		// that used the client while the server was stopped would see
		// errors after Restart. A large pool keeps it dialling.
		opts.PoolSize = 100
		s.client = redis.NewClient(opts)
	}
	return s.client
}

// Stop kills the server, as a crash would; the port stays the server's
// for Restart. Data not saved by a SAVE command is lost. Stopping a
// stopped server does nothing.
func (s *Server) Stop() { s.run.Stop() }

// Restart starts a stopped server again on the same port and directory,
// so it loads what the last SAVE wrote (nothing, unless the test saved).
// It fails the test when the port was taken in the meantime.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.TryRestart(); err != nil {
		s.t.Fatal(err)
	}
}

// TryRestart is Restart that returns its failure instead of failing the
// test, for a caller on a goroutine other than the test's (t.Fatal may
// not be called there).
func (s *Server) TryRestart() error {
	return s.run.Restart("redistest", s.Addr(), s.start)
}

var errPortTaken = errors.New("port already in use")

// start runs redis-server on s.port and waits until it answers PING.
func (s *Server) start() error {
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "", // stdout, which is kept for error messages
	}
	if s.cfg.notifySet {
		args = append(args, "--notify-keyspace-events", s.cfg.notify)
	}
	if s.cfg.password != "" {
		args = append(args, "--requirepass", s.cfg.password)
	}
	p, err := testproc.Start(exec.Command(s.bin, args...))
	if err != nil {
		return err
	}
	if err := waitReady(p, s.Addr(), s.cfg.password, p.Pid()); err != nil {
		p.Kill()
		out := p.Output()
		if strings.Contains(out, addrInUseText) {
			err = fmt.Errorf("%w: %s", errPortTaken, s.Addr())
		}
		return fmt.Errorf("redis-server on %s: %w\n--- redis-server output ---\n%s", s.Addr(), err, out)
	}
	s.run.Set(p)
	return nil
}

// waitReady polls PING until it answers, the process exits or time is up.
// The answer must come from process pid: another server that took the port
// first would answer PING too while this one exits, port in use.
func waitReady(p *testproc.Process, addr, password string, pid int) error {
	opts := clientOptions(addr, password)
	opts.MaxRetries = -1 // one try per poll; the loop is the retry
	opts.DialTimeout = 500 * time.Millisecond
	c := redis.NewClient(opts)
	defer c.Close()

	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		var info string
		if err == nil {
			info, err = c.Info(ctx, "server").Result()
		}
		cancel()
		if err == nil {
			if !strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r\n") {
				return fmt.Errorf("%w: another server answers on %s", errPortTaken, addr)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING after %s: %w", startTimeout, err)
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("exited before answering PING (%v)", p.State())
		case <-tick.C:
		}
	}
}

func clientOptions(addr, password string) *redis.Options {
	return &redis.Options{
		Addr:     addr,
		Password: password,
		// Plain Redis has no maintenance notifications; asking for them
		// only adds a handshake to every connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}
