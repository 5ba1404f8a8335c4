//go:build overload

package overload

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowProxy forwards TCP connections to a NATS server and, while slowed,
// holds every byte the server sends for a fixed delay: JetStream answering
// late, as a saturated or partitioned cluster does, while requests still
// reach it at the moment they are offered.
type slowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds added to server → client bytes; 0: none

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

// slow sets the delay of server → client bytes from now on (0 ends it).
func (p *slowProxy) slow(d time.Duration) { p.delay.Store(int64(d)) }

func (p *slowProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *slowProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(server, client) }()
		go p.delayed(client, server)
	}
}

// chunk is what the server sent, and when it may be passed on.
type chunk struct {
	due  time.Time
	data []byte
}

// delayed copies server → client, each read passed on no earlier than the
// delay in force when it was read; order is kept.
func (p *slowProxy) delayed(client, server net.Conn) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(time.Duration(p.delay.Load())), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := client.Write(c.data); err != nil {
			return
		}
	}
	_ = client.Close()
}
