package embedded

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ClusterOptions say how many servers run, where they listen and store.
type ClusterOptions struct {
	// Name is the cluster's name and the prefix of its servers' names
	// (<name>-1, <name>-2, …). Servers keep their identity across restarts
	// by name, so a restart must use the same Name.
	Name string
	// Host is the client and route listen host (loopback for `sluice dev`).
	Host string
	// Ports are the client ports, one per server; -1 picks a free port.
	Ports []int
	// StoreDirs hold each server's JetStream files, one per server.
	StoreDirs []string
	// Logs turns on the servers' own logging to stderr.
	Logs bool
	// Trust, when set, runs every server in operator mode (see Options):
	// each keeps the accounts in its own full resolver (StoreDir/jwt), and
	// the resolvers share the updates pushed to any one of them.
	Trust *Trust
}

// Cluster is a running JetStream cluster of embedded servers connected by
// routes over loopback. Servers can be stopped and restarted one at a time.
type Cluster struct {
	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server // nil where stopped
	trust   *Trust
}

// StartCluster starts len(o.StoreDirs) servers clustered with each other and
// waits until JetStream has a meta leader that every server follows.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	n := len(o.StoreDirs)
	if n < 1 || len(o.Ports) != n {
		return nil, fmt.Errorf("cluster: %d store directories and %d ports: want one of each per server", n, len(o.Ports))
	}
	if o.Name == "" {
		o.Name = "sluice"
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	// Ports are found free first, and may be taken (for example by a client
	// connection's ephemeral port) before a server binds them: a server that
	// cannot listen never becomes ready. The first start tries fresh ports
	// twice more before giving up.
	var c *Cluster
	for attempt := 1; ; attempt++ {
		var err error
		if c, err = startClusterOnce(o, n, firstStartTimeout); err == nil {
			break
		}
		if attempt == 3 {
			return nil, err
		}
	}
	if err := c.WaitReady(30 * time.Second); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// firstStartTimeout bounds a server's first start: its listeners come up in
// milliseconds unless a port was taken.
const firstStartTimeout = 10 * time.Second

// startClusterOnce starts the n servers of o on ports found free now.
func startClusterOnce(o ClusterOptions, n int, timeout time.Duration) (*Cluster, error) {
	routePorts, err := freePorts(o.Host, n)
	if err != nil {
		return nil, err
	}
	clientPorts := make([]int, n)
	for i, p := range o.Ports {
		if p > 0 {
			clientPorts[i] = p
			continue
		}
		// Pick now, so that a restarted server keeps its URL.
		ps, err := freePorts(o.Host, 1)
		if err != nil {
			return nil, err
		}
		clientPorts[i] = ps[0]
	}
	routes := make([]string, n)
	for i, p := range routePorts {
		routes[i] = "nats-route://" + net.JoinHostPort(o.Host, strconv.Itoa(p))
	}
	c := &Cluster{opts: make([]*server.Options, n), servers: make([]*server.Server, n), trust: o.Trust}
	for i := range n {
		c.opts[i] = &server.Options{
			ServerName: fmt.Sprintf("%s-%d", o.Name, i+1),
			Host:       o.Host,
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   o.StoreDirs[i],
			NoSigs:     true,
			NoLog:      !o.Logs,
			MaxPayload: maxPayload,
			Cluster: server.ClusterOpts{
				Name: o.Name,
				Host: o.Host,
				Port: routePorts[i],
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
	}
	// Start them all before waiting: a lone server cannot elect a leader.
	for i := range n {
		if err := c.start(i, timeout); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	return c, nil
}

// start creates and starts server i without waiting for JetStream.
func (c *Cluster) start(i int, timeout time.Duration) error {
	if c.trust != nil {
		// A resolver per start: a stopped server closed its own. Accounts
		// pushed since are kept in its directory (the newer JWT wins).
		if err := c.trust.configure(c.opts[i]); err != nil {
			return fmt.Errorf("nats-server %s: %w", c.opts[i].ServerName, err)
		}
	}
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		return fmt.Errorf("nats-server %s: %w", c.opts[i].ServerName, err)
	}
	if !c.opts[i].NoLog {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(timeout) {
		s.Shutdown()
		return fmt.Errorf("nats-server %s on port %d did not become ready within %s", c.opts[i].ServerName, c.opts[i].Port, timeout)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// WaitReady waits until the running servers agree on a JetStream meta
// leader and each of them is current with it.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running := c.Servers()
		leader, current := false, 0
		for _, s := range running {
			if s.JetStreamIsLeader() {
				leader = true
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		if leader && current == len(running) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats cluster: no JetStream meta leader within %s (%d of %d servers current)", timeout, current, len(running))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Servers returns the running servers, in order.
func (c *Cluster) Servers() []*server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*server.Server
	for _, s := range c.servers {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Server returns server i (0-based), nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Size is the number of servers, running or stopped.
func (c *Cluster) Size() int { return len(c.opts) }

// Name is server i's name.
func (c *Cluster) Name(i int) string { return c.opts[i].ServerName }

// ClientURLs are every server's client URL, stopped ones included: clients
// given all of them reconnect to whichever runs.
func (c *Cluster) ClientURLs() []string {
	out := make([]string, len(c.opts))
	for i, o := range c.opts {
		out[i] = "nats://" + net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	}
	return out
}

// URL is ClientURLs joined by commas, as nats.Connect takes them.
func (c *Cluster) URL() string { return strings.Join(c.ClientURLs(), ",") }

// Stop shuts server i down and waits until it has; stopping a stopped
// server does nothing.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts a stopped server i again, on the same ports and store,
// and waits until the cluster is ready again.
func (c *Cluster) Restart(i int) error {
	if c.Server(i) != nil {
		return fmt.Errorf("nats-server %s is running", c.opts[i].ServerName)
	}
	// A copy: the server keeps and changes the options it was given.
	o := c.opts[i].Clone()
	c.opts[i] = o
	if err := c.start(i, readyTimeout); err != nil {
		return err
	}
	return c.WaitReady(30 * time.Second)
}

// Shutdown stops every server. It is safe to call more than once.
func (c *Cluster) Shutdown() {
	for i := range c.opts {
		c.Stop(i)
	}
}

// freePorts returns n ports free on host right now.
func freePorts(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", host, err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
