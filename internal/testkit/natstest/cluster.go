package natstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/embedded"
)

// Cluster is a running JetStream cluster of n embedded servers over
// loopback routes, with every bucket replicated on it and a connection that
// knows every server's URL (so it fails over). Env.Server is the first
// server as started; Env.URL lists them all.
type Cluster struct {
	*Env
	// Nodes runs the servers; stop and restart one with StopServer and RestartServer.
	Nodes *embedded.Cluster
}

// StartCluster starts n servers clustered with each other, each with its
// own t.TempDir store, creates every bucket and the stream with settings s
// (replicated on all n servers unless s.Replicas asks for more than 1) and stops it all at cleanup.
// With EnvSecure every server runs in operator mode, as StartSecure's. A 3-node cluster
// starts in well under a second: reuse one across subtests.
func StartCluster(t testing.TB, n int, s contract.Settings) *Cluster {
	t.Helper()
	if s.Replicas <= 1 {
		s.Replicas = n
	}
	base := t.TempDir()
	dirs, ports := make([]string, n), make([]int, n)
	for i := range n {
		dirs[i], ports[i] = filepath.Join(base, fmt.Sprintf("n%d", i+1)), -1
	}
	o := embedded.ClusterOptions{Name: "test", StoreDirs: dirs, Ports: ports}
	var setup *creds.Setup
	if os.Getenv(EnvSecure) == "1" {
		setup, o.Trust = secureSetup(t, base)
	}
	c, err := embedded.StartCluster(o)
	if err != nil {
		t.Fatalf("start nats cluster: %v", err)
	}
	t.Cleanup(c.Shutdown)
	e := &Env{Server: c.Server(0), URL: c.URL(), StoreDir: base, Settings: s}
	if setup != nil {
		e.secure(t, setup)
	}
	e.connectAndEnsure(t, true)
	return &Cluster{Env: e, Nodes: c}
}

// StopServer shuts down server i (0-based); the connection moves to another.
func (c *Cluster) StopServer(t testing.TB, i int) {
	t.Helper()
	c.Nodes.Stop(i)
}

// RestartServer starts a stopped server i again on its ports and store and
// waits until the cluster has a JetStream leader every server follows.
func (c *Cluster) RestartServer(t testing.TB, i int) {
	t.Helper()
	if err := c.Nodes.Restart(i); err != nil {
		t.Fatalf("restart server %d: %v", i, err)
	}
}
