package bench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// entry is a nodes-bucket watch entry.
type entry struct {
	key string
	rev uint64
	op  jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return contract.BucketNodes }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return nil }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func TestLostPresence_CountsNodesWhosePresenceWentAway(t *testing.T) {
	put, del, purge := jetstream.KeyValuePut, jetstream.KeyValueDelete, jetstream.KeyValuePurge
	tests := []struct {
		name  string
		given []jetstream.KeyValueEntry
		until uint64
		want  int
	}{
		{name: "registrations and heartbeats: none lost", want: 0, given: []jetstream.KeyValueEntry{
			entry{"node-1", 1, put}, entry{"node-2", 2, put}, nil, entry{"node-1", 3, put}}},
		// The nodes bucket's TTL marker (Nats-Marker-Reason: MaxAge) reads as a purge.
		{name: "an expiry marker: one", want: 1, given: []jetstream.KeyValueEntry{
			entry{"node-1", 1, put}, entry{"node-2", 2, put}, entry{"node-1", 3, purge}}},
		{name: "a delete: one", want: 1, given: []jetstream.KeyValueEntry{
			entry{"node-1", 1, put}, entry{"node-1", 2, del}}},
		{name: "a node lost twice counts once", want: 1, given: []jetstream.KeyValueEntry{
			entry{"node-1", 1, put}, entry{"node-1", 2, purge}, entry{"node-1", 3, put}, entry{"node-1", 4, purge}}},
		{name: "two nodes lost: two", want: 2, given: []jetstream.KeyValueEntry{
			entry{"node-1", 1, purge}, entry{"node-2", 2, del}}},
		{name: "a loss after the window is not counted", until: 3, want: 1, given: []jetstream.KeyValueEntry{
			entry{"node-1", 1, put}, entry{"node-1", 2, purge}, entry{"node-2", 3, put}, entry{"node-2", 4, purge}}},
		{name: "a node lost before and after the window: counted", until: 3, want: 1, given: []jetstream.KeyValueEntry{
			entry{"node-1", 2, purge}, entry{"node-1", 5, purge}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l lostPresence
			for _, e := range tt.given {
				l.see(e)
			}
			if got := l.count(tt.until); got != tt.want {
				t.Errorf("count(%d) = %d, want %d", tt.until, got, tt.want)
			}
		})
	}
}

// A real expiry: an agent that stops heartbeating leaves its presence to
// the nodes bucket's TTL; the watch must count that node, and only it.
func TestPresenceWatch_StoppedAgent_CountedOnceItsLeaseExpires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	settings := contract.DefaultSettings()
	settings.NodeLease = contract.MinLease // 1s: a beat every 333ms
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := buckets.Ensure(ctx, js, settings); err != nil {
		t.Fatal(err)
	}
	b, err := buckets.BindAll(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	b.NodeLease = settings.NodeLease
	w, err := watchPresence(ctx, srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.stop)

	start := func(node string) (stop func()) {
		a, err := agent.New(agent.Config{Conn: nc, Settings: settings, Log: zerolog.Nop(), Node: node, Version: "test",
			Applier:   agent.ApplierFunc(func(context.Context, *sluicev1.DesiredConfig) error { return nil }),
			JetStream: js, Buckets: b})
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(actx) }()
		t.Cleanup(func() { acancel(); <-done })
		return func() { acancel(); <-done }
	}
	stopped := start("node-stopped")
	start("node-live")
	nodes := store.New(b.Nodes, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} })
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		keys, err := nodes.Keys(ctx)
		return len(keys) == 2, err
	}); err != nil {
		t.Fatalf("waiting for two agents to register: %v", err)
	}
	if n := w.count(0); n != 0 {
		t.Fatalf("%d presences lost while both agents beat, want 0", n)
	}
	stopped()
	// The lease is 1s; the server expires it and writes its marker soon after.
	if err := waitFor(ctx, 20*time.Second, func() (bool, error) { return w.count(0) >= 1, nil }); err != nil {
		t.Fatalf("the stopped agent's presence expired unseen: %v", err)
	}
	// Three more leases: the live agent keeps its presence, and the stopped
	// node is still one.
	if err := sleep(ctx, 3*settings.NodeLease); err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, contract.StreamOfBucket(contract.BucketNodes))
	if err != nil {
		t.Fatal(err)
	}
	last := info.CachedInfo().State.LastSeq
	got, err := w.lostUntil(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Errorf("presence_lost = %d, want 1 (node-stopped only)", got)
	}
	if _, err := nodes.Get(ctx, "node-stopped"); err == nil {
		t.Errorf("node-stopped's presence is still there: the lease did not expire")
	}
}
