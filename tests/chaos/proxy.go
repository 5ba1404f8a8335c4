package chaos

import (
	"net"
	"sync"
	"time"
)

// proxy stands between the services and a single nats-server, so that the
// harness can break one component's network without touching the server:
// drop closes its connections (the client reconnects; requests in flight are
// never answered), stall holds its bytes for a while (requests time out and
// their answers arrive late). These are the transient KV errors of the fault
// schedule.
type proxy struct {
	target string // the server's address
	mu     sync.Mutex
	lns    map[string]net.Listener
	conns  map[string][]net.Conn
	stalls map[string]chan struct{} // closed when the stall ends
}

func newProxy(target string) *proxy {
	return &proxy{target: target, lns: map[string]net.Listener{}, conns: map[string][]net.Conn{}, stalls: map[string]chan struct{}{}}
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
