package configurator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// wait bounds every wait on the configurator or the server. Margin: each
// wait returns as soon as its condition holds, and 30s is far more than a
// cold start, an apply or a sync takes on a loaded 2-core machine.
const wait = 30 * time.Second

// running is a configurator started by a test.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a configurator on its own connection to env and waits until it answers.
func start(t *testing.T, env *natstest.Env, opts ...func(*configurator.Config)) *running {
	t.Helper()
	cfg := configurator.Config{Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.New(zerolog.NewTestWriter(t))}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := configurator.New(cfg)
	if err != nil {
		t.Fatalf("new configurator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	natstest.Eventually(t, wait, "the configurator to answer pings", func() bool {
		select {
		case err := <-r.done:
			t.Fatalf("configurator stopped at start: %v", err)
		default:
		}
		return apiclient.Ready(context.Background(), env.Conn) == nil // every endpoint, not just the ping
	})
	return r
}

// stop stops the configurator and fails the test if Run returned an error. Safe twice.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(wait):
			r.err = fmt.Errorf("Run did not return within %s of cancel", wait)
		}
	})
	if r.err != nil {
		t.Errorf("configurator Run: %v", r.err)
	}
}

func apply(t *testing.T, nc *nats.Conn, req *sluicev1.ApplyRequest) (*sluicev1.ApplyResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return apiclient.Apply(ctx, nc, req)
}

func del(t *testing.T, nc *nats.Conn, kind, name string) (*sluicev1.DeleteResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return apiclient.Delete(ctx, nc, &sluicev1.DeleteRequest{Kind: kind, Name: name})
}

func mustApply(t *testing.T, nc *nats.Conn, req *sluicev1.ApplyRequest) *sluicev1.ApplyResponse {
	t.Helper()
	resp, err := apply(t, nc, req)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return resp
}

// examples are the repository's example intents.
func examples(t *testing.T) []*sluicev1.Intent {
	t.Helper()
	ins, err := intent.ParseFiles("../../examples")
	if err != nil {
		t.Fatalf("parse examples: %v", err)
	}
	return ins
}

func find(t *testing.T, ins []*sluicev1.Intent, id string) *sluicev1.Intent {
	t.Helper()
	for _, in := range ins {
		if intent.ID(in) == id {
			return in
		}
	}
	t.Fatalf("no intent %s", id)
	return nil
}

// snapshot is every stored value of the intents and revisions buckets.
type snapshot struct {
	intents   map[string]uint64 // key → KV revision
	revisions map[string]uint64
}

func takeSnapshot(t *testing.T, env *natstest.Env) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{intents: map[string]uint64{}, revisions: map[string]uint64{}}
	// Raw entries: only each key's revision matters, whatever it holds
	// (a store of one type would find the others' keys not well-formed).
	for _, x := range []struct {
		kv  jetstream.KeyValue
		dst map[string]uint64
	}{
		{env.Buckets.Intents, s.intents},
		{env.Buckets.Revisions, s.revisions},
	} {
		keys, err := x.kv.Keys(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			t.Fatal(err)
		}
		for _, k := range keys {
			e, err := x.kv.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			x.dst[k] = e.Revision()
		}
	}
	return s
}

func getHead(t *testing.T, env *natstest.Env) store.Entry[*sluicev1.Head] {
	t.Helper()
	e, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil {
		t.Fatalf("get head: %v", err)
	}
	return e
}

// headNow is the head, nil while none is stored: for polling, since a
// sync stores its intents before its head (the journal makes both land).
func headNow(t *testing.T, env *natstest.Env) *sluicev1.Head {
	t.Helper()
	e, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("get head: %v", err)
	}
	return e.Value
}

func getRevision(t *testing.T, env *natstest.Env, id string) *sluicev1.Revision {
	t.Helper()
	e, err := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }).Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get revision %s: %v", id, err)
	}
	return e.Value
}

func intentsStore(env *natstest.Env) *store.Store[*sluicev1.StoredIntent] {
	return store.New(env.Buckets.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
}

func getStored(t *testing.T, env *natstest.Env, key string) *sluicev1.StoredIntent {
	t.Helper()
	e, err := intentsStore(env).Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get intent %s: %v", key, err)
	}
	return e.Value
}

// eventLog collects the events published while a test runs.
type eventLog struct {
	mu  sync.Mutex
	evs []*sluicev1.Event
}

func watchEvents(t *testing.T, nc *nats.Conn) *eventLog {
	t.Helper()
	l := &eventLog{}
	sub, err := nc.Subscribe(contract.EventsSubjectPrefix+".>", func(m *nats.Msg) {
		ev := &sluicev1.Event{}
		if err := store.Unmarshal(m.Data, ev); err != nil {
			t.Errorf("decode event: %v", err)
			return
		}
		l.mu.Lock()
		l.evs = append(l.evs, ev)
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return l
}

// waitFor waits until n events arrived and returns them as "Type id" strings.
func (l *eventLog) waitFor(t *testing.T, n int) []string {
	t.Helper()
	natstest.Eventually(t, wait, "events", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.evs) >= n
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		out = append(out, ev.GetType()+" "+ev.GetKind()+" "+ev.GetId())
	}
	return out
}

func (l *eventLog) all() []*sluicev1.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// startWithMaxPayload is natstest.Start on a server that accepts messages of
// at most maxPayload bytes, so that tests reach the limit with small batches.
func startWithMaxPayload(t *testing.T, maxPayload int32) *natstest.Env {
	t.Helper()
	dir := t.TempDir()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true, MaxPayload: maxPayload,
	})
	if err != nil {
		t.Fatalf("nats-server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(wait) {
		t.Fatalf("nats-server not ready within %s", wait)
	}
	t.Cleanup(srv.Shutdown)
	env := &natstest.Env{Server: srv, URL: srv.ClientURL(), StoreDir: dir, Settings: contract.DefaultSettings()}
	env.Conn = env.Connect(t)
	if env.JS, err = jetstream.New(env.Conn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := buckets.Ensure(ctx, env.JS, env.Settings); err != nil {
		t.Fatalf("ensure buckets: %v", err)
	}
	if env.Buckets, err = buckets.BindAll(ctx, env.JS); err != nil {
		t.Fatalf("open buckets: %v", err)
	}
	return env
}

// tables is n valid routing tables named prefix-00000 … with distinct table
// ids from firstID, each about 200 bytes as protojson.
func tables(prefix string, firstID, n int) []*sluicev1.Intent {
	out := make([]*sluicev1.Intent, n)
	for i := range out {
		out[i] = &sluicev1.Intent{Name: fmt.Sprintf("%s-%05d", prefix, i), Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{
			TableId: uint32(firstID + i),
			NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{
				"topology.kubernetes.io/zone": "zone-a-with-a-long-name", "example.com/rack": "rack-0001-row-b",
			}},
		}}}
	}
	return out
}

// encodedSize is how many bytes v takes as a stored value.
func encodedSize(t *testing.T, v proto.Message) int {
	t.Helper()
	b, err := store.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// journalStore reads and writes revisions/pending.
func journalStore(env *natstest.Env) *store.Store[*sluicev1.ApplyJournal] {
	return store.New(env.Buckets.Revisions, func() *sluicev1.ApplyJournal { return &sluicev1.ApplyJournal{} })
}

// ofType returns the events of type typ seen so far.
func (l *eventLog) ofType(typ string) []*sluicev1.Event {
	var out []*sluicev1.Event
	for _, ev := range l.all() {
		if ev.GetType() == typ {
			out = append(out, ev)
		}
	}
	return out
}
