package chaos

import (
	"bytes"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// proxy stands between the services and a single nats-server, so that the
// harness can break one component's network without touching the server:
// drop closes its connections (the client reconnects; requests in flight are
// never answered), stall holds its bytes for a while (requests time out and
// their answers arrive late). These are the transient KV errors of the fault
// schedule.
//
// On virtual time (CHAOS_VIRTUAL) there is no socket: a component's
// connections are in-process pipes to the server (inProcess), pumped through
// the proxy so that drop closes them and stall holds their bytes.
type proxy struct {
	target   string                     // the server's address
	upstream nats.InProcessConnProvider // on virtual time: the server now (natstest.InProcess follows restarts)
	mu       sync.Mutex
	lns      map[string]net.Listener
	conns    map[string][]net.Conn
	stalls   map[string]chan struct{} // closed when the stall ends
}

func newProxy(target string) *proxy {
	return &proxy{target: target, lns: map[string]net.Listener{}, conns: map[string][]net.Conn{}, stalls: map[string]chan struct{}{}}
}

func newInProcessProxy(upstream nats.InProcessConnProvider) *proxy {
	return &proxy{upstream: upstream, lns: map[string]net.Listener{}, conns: map[string][]net.Conn{}, stalls: map[string]chan struct{}{}}
}

// inProcess is component's nats.InProcessConnProvider: each connection
// (and reconnection) is a new in-process pipe to the server running now.
func (p *proxy) inProcess(component string) inProcessDialer {
	return inProcessDialer{p: p, component: component}
}

type inProcessDialer struct {
	p         *proxy
	component string
}

func (d inProcessDialer) InProcessConn() (net.Conn, error) {
	s, err := d.p.upstream.InProcessConn()
	if err != nil {
		return nil, err
	}
	// A pipe has no buffer: a stall that held a client's write would hold
	// it inside nats.go's connection lock, and every other user of the
	// connection would wait on that lock, which virtual time does not
	// count as waiting (the clock would stand still). So the client gets a
	// pipe of its own, and two pumps queue its bytes both ways as a
	// socket's buffers would, holding them while the component is stalled.
	c, mid := net.Pipe()
	d.p.mu.Lock()
	d.p.conns[d.component] = append(d.p.conns[d.component], mid, s)
	d.p.mu.Unlock()
	hs := make(chan struct{})
	go d.p.queued(d.component, mid, s, hs, nil)
	go d.p.queued(d.component, s, mid, nil, hs)
	return c, nil
}

// pong ends the connect handshake: nats.go sends CONNECT and PING and
// waits for this answer.
var pong = []byte("PONG\r\n")

// queued copies from to to through a queue, like pipe, but reading on
// while a stall holds the writes.
//
// A stall does not hold a connection's handshake (the server's INFO, the
// client's CONNECT and PING, the server's PONG): nats.go reads the INFO
// and the PONG holding its connection lock, so any other user of the
// connection would wait on that lock, which the clock does not count, and
// a stall on a component reconnecting after restart-nats stood the clock
// still (seeds 896, 966). On real time the handshake waits out the stall;
// here it completes and only what follows waits, the same to the
// component: nothing it sends is answered until the stall ends. The
// server-to-client pump closes handshake just before it passes the PONG;
// the client-to-server pump passes bytes unheld until then (untilDone).
func (p *proxy) queued(component string, from, to net.Conn, untilDone, handshake chan struct{}) {
	q := make(chan []byte, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				q <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	defer from.Close()
	defer to.Close()
	var tail []byte // the end of what passed, for a PONG split across reads
	for b := range q {
		switch {
		case handshake != nil:
			if seen := append(tail, b...); bytes.Contains(seen, pong) {
				close(handshake)
				handshake = nil
			} else {
				tail = seen[max(0, len(seen)-len(pong)+1):]
			}
		case untilDone != nil:
			select {
			case <-untilDone:
				untilDone = nil
				p.waitStall(component)
			default:
			}
		default:
			p.waitStall(component)
		}
		if _, err := to.Write(b); err != nil {
			break
		}
	}
	_ = from.Close()
	for range q { // until the reader sees the close
	}
}

// addr is the address component connects to, listening on first use.
func (p *proxy) addr(component string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ln := p.lns[component]; ln != nil {
		return ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p.lns[component] = ln
	go p.serve(component, ln)
	return ln.Addr().String(), nil
}

func (p *proxy) serve(component string, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil { // the server is down: the client retries
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[component] = append(p.conns[component], c, s)
		p.mu.Unlock()
		go p.pipe(component, c, s)
		go p.pipe(component, s, c)
	}
}

func (p *proxy) pipe(component string, from, to net.Conn) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.waitStall(component)
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or closed: close both ways
			return
		}
	}
}

func (p *proxy) waitStall(component string) {
	p.mu.Lock()
	ch := p.stalls[component]
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// drop closes every connection of component; returns how many.
func (p *proxy) drop(component string) int {
	p.mu.Lock()
	cs := p.conns[component]
	delete(p.conns, component)
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	return len(cs) / 2
}

// stall holds component's traffic, both ways, for d.
func (p *proxy) stall(component string, d time.Duration) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.stalls[component] = ch
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	delete(p.stalls, component)
	p.mu.Unlock()
	close(ch)
}

func (p *proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ln := range p.lns {
		_ = ln.Close()
	}
	for _, cs := range p.conns {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}
