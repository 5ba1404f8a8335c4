package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

const examples = `kind: Layer2Network
name: tenant-a
spec: {vlan: 100, vni: 10100, nodeSelector: {matchLabels: {zone: zone-a}}}
---
kind: RoutingTable
name: mgmt
spec: {tableId: 100}
`

// client is a connection to a running dev system with its buckets.
type client struct {
	nc *nats.Conn
	b  *buckets.Set
}

func connect(t *testing.T, s *System) client {
	t.Helper()
	var opts []nats.Option
	if f := s.AdminCreds(); f != "" {
		opts = append(opts, nats.UserCredentials(f))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buckets.BindAll(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return client{nc: nc, b: b}
}

func (c client) head(t *testing.T) *sluicev1.Head {
	t.Helper()
	e, err := store.New(c.b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	return e.Value
}

func (c client) intents(t *testing.T) map[string]*sluicev1.StoredIntent {
	t.Helper()
	entries, err := store.New(c.b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).List(context.Background(), ">")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*sluicev1.StoredIntent{}
	for _, e := range entries {
		out[e.Key] = e.Value
	}
	return out
}

func (c client) lastApplied(t *testing.T) *sluicev1.RolloutRef {
	t.Helper()
	e, err := store.New(c.b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Get(context.Background(), contract.KeyLastApplied)
	if err != nil {
		return nil
	}
	return e.Value
}

func start(t *testing.T, opts Options) *System {
	t.Helper()
	s, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func TestDev_Restart_ResumesAndDoesNotReapplyTheExamples(t *testing.T) {
	data := t.TempDir()
	exDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(examples), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{DataDir: data, Listen: "127.0.0.1:-1", Agents: 3, Examples: exDir, MaxParallel: "2", Stderr: io.Discard}

	s := start(t, opts)
	if seed := s.Seeded(); !seed.FirstStart || seed.Intents != 2 || seed.Revision == "" {
		t.Fatalf("first start seeded %+v, want 2 intents and a revision", seed)
	}
	if got := strings.Join(s.Nodes(), ","); got != "node-01,node-02,node-03" {
		t.Errorf("nodes %s", got)
	}
	c := connect(t, s)
	// margin: the poll ends as soon as the rollout is done; 60s is many
	// times what three local agents take on a loaded machine.
	natstest.Eventually(t, 60*time.Second, "the examples rolled out to every node", func() bool {
		return c.lastApplied(t).GetGeneration() == 1
	})
	for _, n := range s.Nodes() {
		if _, err := os.Stat(filepath.Join(data, "agents", n, "config.json")); err != nil {
			t.Errorf("agent %s wrote no config: %v", n, err)
		}
	}
	// The operator changes what the examples set up.
	if _, err := apiclient.Delete(context.Background(), c.nc, &sluicev1.DeleteRequest{Kind: "RoutingTable", Name: "mgmt"}); err != nil {
		t.Fatal(err)
	}
	before := c.head(t)
	if before.GetGeneration() != 2 {
		t.Fatalf("head generation %d after the delete, want 2", before.GetGeneration())
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}

	s = start(t, opts)
	if seed := s.Seeded(); seed.FirstStart || seed.Intents != 0 {
		t.Errorf("restart seeded %+v, want nothing", seed)
	}
	c = connect(t, s)
	if after := c.head(t); after.GetRevision() != before.GetRevision() || after.GetGeneration() != before.GetGeneration() {
		t.Errorf("head after restart %v, want %v", after, before)
	}
	// tenant-a is there; mgmt is still marked for deletion (re-applying the
	// examples would have revived it) unless the reaper has removed it.
	intents := c.intents(t)
	if intents["layer2network.tenant-a"] == nil {
		t.Errorf("tenant-a is gone after restart: %v", intents)
	}
	if m := intents["routingtable.mgmt"]; m != nil && !m.GetMarkedForDeletion() {
		t.Errorf("mgmt was revived by the restart: %v", m)
	}
	if !strings.Contains(s.Banner(), "not applied") {
		t.Errorf("banner does not say the examples were not applied:\n%s", s.Banner())
	}
}

func TestDev_Wait_ReturnsOnceTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	cancel()
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("wait: %v", err)
		}
	case <-time.After(60 * time.Second): // margin: Wait returns as soon as everything stopped
		t.Fatal("Wait did not return after the context ended")
	}
	if _, err := nats.Connect(s.URL(), nats.Timeout(time.Second)); err == nil {
		t.Error("the server still accepts connections after Wait")
	}
}

func TestDev_ListenAddressInUse_SaysSo(t *testing.T) {
	s := start(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Stderr: io.Discard})
	addr := strings.TrimPrefix(s.URL(), "nats://")
	_, err := Start(context.Background(), Options{DataDir: t.TempDir(), Listen: addr, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "is another `sluice dev` running?") {
		t.Errorf("got %v", err)
	}
}

func TestNodeName(t *testing.T) {
	tests := []struct {
		i, n int
		want string
	}{
		{0, 5, "node-01"},
		{9, 99, "node-10"},
		{0, 100, "node-001"},
		{99, 100, "node-100"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := NodeName(tt.i, tt.n); got != tt.want {
				t.Errorf("NodeName(%d, %d) = %s, want %s", tt.i, tt.n, got, tt.want)
			}
		})
	}
}

func TestNodeLabels_SpreadOverZonesAndRacks(t *testing.T) {
	seen := map[string]bool{}
	for i := range 6 {
		l := NodeLabels(i)
		seen[l["zone"]+"/"+l["rack"]] = true
	}
	if len(seen) != 6 {
		t.Errorf("6 nodes cover %d zone/rack pairs, want 6: %v", len(seen), seen)
	}
}

func TestDev_CheckCmd_FailingNodeReportsInvalidWithTheCheck(t *testing.T) {
	exDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(examples), 0o644); err != nil {
		t.Fatal(err)
	}
	check := `test "$SLUICE_NODE" != node-03`
	s := start(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", Agents: 3, Examples: exDir, Stderr: io.Discard, CheckCmds: []string{check}})
	if !strings.Contains(s.Banner(), check) {
		t.Errorf("banner does not show the check:\n%s", s.Banner())
	}
	c := connect(t, s)
	statuses := store.New(c.b.Status, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} })
	var st *sluicev1.NodeStatus
	// margin: the poll ends as soon as node-03 reports.
	natstest.Eventually(t, 60*time.Second, "node-03 Invalid by its check", func() bool {
		e, err := statuses.Get(context.Background(), "node-03")
		st = e.Value
		return err == nil && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID && st.GetFailedCheck() == "exec: "+check
	})
	// node-03 had no last-good: it went back to the empty config, on disk too.
	empty := render.Fingerprint(&sluicev1.NodeConfig{})
	if st.GetAppliedFingerprint() != empty || !strings.Contains(st.GetMessage(), "restored an empty config") {
		t.Fatalf("node-03 status = %v, want the empty config %s restored", st, render.Short(empty))
	}
	b, err := os.ReadFile(filepath.Join(s.opts.DataDir, "agents", "node-03", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := &sluicev1.DesiredConfig{}
	if err := store.Unmarshal(b, onDisk); err != nil || onDisk.GetFingerprint() != empty {
		t.Fatalf("node-03 config.json = %s (%v), want the empty config", b, err)
	}
}

func TestDev_SecondInstanceOnTheSameDataDir_RefusedWithWhoHoldsIt(t *testing.T) {
	data := t.TempDir()
	s := start(t, Options{DataDir: data, Listen: "127.0.0.1:-1", Stderr: io.Discard})
	_, err := Start(context.Background(), Options{DataDir: data, Listen: "127.0.0.1:-1", Stderr: io.Discard})
	if !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second instance: got %v, want ErrDataDirInUse", err)
	}
	for _, want := range []string{data, fmt.Sprintf("process %d", os.Getpid()), "stop that one first, or pass --data with another directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The first one is untouched, and once it stops the directory is free.
	connect(t, s)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	start(t, Options{DataDir: data, Listen: "127.0.0.1:-1", Stderr: io.Discard})
}

func TestDev_NATSCluster3_ReplicatesEveryBucketAndRestartsOnTheSameDataDir(t *testing.T) {
	data := t.TempDir()
	exDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(examples), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{DataDir: data, Listen: "127.0.0.1:-1", NATSCluster: 3, Agents: 2, Examples: exDir, Stderr: io.Discard}
	s := start(t, opts)
	if n := len(strings.Split(s.URL(), ",")); n != 3 {
		t.Fatalf("URL %s: want the three servers' URLs", s.URL())
	}
	if b := s.Banner(); !strings.Contains(b, "3-server cluster, every bucket R3") || !strings.Contains(b, "kill -USR1") {
		t.Errorf("banner does not describe the cluster:\n%s", b)
	}
	c := connect(t, s)
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range contract.DefaultSettings().BucketConfigs() {
		st, err := js.Stream(context.Background(), contract.StreamOfBucket(cfg.Bucket))
		if err != nil || st.CachedInfo().Config.Replicas != 3 {
			t.Fatalf("bucket %s: %v, want 3 replicas", cfg.Bucket, err)
		}
	}
	// margin: the poll ends as soon as the rollout is done.
	natstest.Eventually(t, 60*time.Second, "the examples rolled out", func() bool {
		return c.lastApplied(t).GetGeneration() == 1
	})
	// One server stops: the rest carry on (an intent is applied), and it comes back.
	s.Cluster().Stop(2)
	// margin: the poll ends at the first apply that lands; a new stream
	// leader is elected within a few seconds, and each attempt gets 10s.
	heads := store.New(c.b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	natstest.Eventually(t, 60*time.Second, "an apply with one server stopped", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := apiclient.Delete(ctx, c.nc, &sluicev1.DeleteRequest{Kind: "RoutingTable", Name: "mgmt"})
		if err == nil {
			return true
		}
		// An attempt whose answer came too late may have landed: then asking
		// again changes nothing, and the head says it landed.
		h, err := heads.Get(ctx, contract.KeyHead)
		return err == nil && h.Value.GetGeneration() == 2
	})
	if err := s.Cluster().Restart(2); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	s = start(t, opts)
	if seed := s.Seeded(); seed.FirstStart {
		t.Errorf("restart of the cluster seeded %+v, want a resumed data directory", seed)
	}
	c = connect(t, s)
	if h := c.head(t); h.GetGeneration() != 2 {
		t.Errorf("head generation %d after restart, want 2 (the delete made with one server down)", h.GetGeneration())
	}
	// A single-server start on the cluster's data directory is refused.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Options{DataDir: data, Listen: "127.0.0.1:-1", Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "was made with --nats-cluster 3") {
		t.Errorf("single server on a cluster data directory: got %v", err)
	}
}

// TestDev_SecureCluster_RollsOutAndKeepsARevocationAcrossAServerRestart:
// --secure with --nats-cluster 3: the examples roll out with every
// component as its role's user; a node revoked while one server is stopped
// is refused by that server too once it is back (its resolver learns the
// account from the others, or keeps what it stored).
func TestDev_SecureCluster_RollsOutAndKeepsARevocationAcrossAServerRestart(t *testing.T) {
	data, exDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(exDir, "intents.yaml"), []byte(examples), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, Options{DataDir: data, Listen: "127.0.0.1:-1", NATSCluster: 3, Agents: 2, Examples: exDir, Stderr: io.Discard, Secure: true})
	c := connect(t, s)
	// margin: the poll ends as soon as the rollout is done.
	natstest.Eventually(t, 60*time.Second, "the examples rolled out", func() bool {
		return c.lastApplied(t).GetGeneration() == 1
	})
	node1, err := s.Creds().UserFile(creds.RoleNode, "node-01") // the agent's own
	if err != nil {
		t.Fatal(err)
	}
	s.Cluster().Stop(2)
	if _, err := s.Creds().Revoke("node-01"); err != nil {
		t.Fatal(err)
	}
	sys, err := nats.Connect(s.Cluster().ClientURLs()[0], nats.UserCredentials(s.Creds().SystemCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := s.Creds().Push(sys, 30*time.Second); err != nil { // margin: the first server's answer ends the wait
		t.Fatal(err)
	}
	if err := s.Cluster().Restart(2); err != nil {
		t.Fatal(err)
	}
	url := s.Cluster().ClientURLs()[2]
	// margin: the poll ends as soon as the restarted server refuses.
	natstest.Eventually(t, 60*time.Second, "the restarted server to refuse node-01", func() bool {
		nc, err := nats.Connect(url, nats.UserCredentials(node1), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return false
		}
		return strings.Contains(strings.ToLower(err.Error()), "authorization")
	})
	if nc, err := nats.Connect(url, nats.UserCredentials(s.AdminCreds())); err != nil {
		t.Fatalf("the admin on the restarted server: %v", err)
	} else {
		nc.Close()
	}
}
