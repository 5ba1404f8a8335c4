package configurator_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/natstest"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// running is a configurator started by a test.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a configurator on its own connection to env and waits until it answers.
func start(t *testing.T, env *natstest.Env) *running {
	t.Helper()
	svc, err := configurator.New(configurator.Config{
		Conn: env.Connect(t), Settings: env.Settings, Log: zerolog.New(zerolog.NewTestWriter(t)),
	})
	if err != nil {
		t.Fatalf("new configurator: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	natstest.Eventually(t, 10*time.Second, "the configurator to answer pings", func() bool {
		select {
		case err := <-r.done:
			t.Fatalf("configurator stopped at start: %v", err)
		default:
		}
		_, err := env.Conn.Request("$SRV.PING."+contract.ConfiguratorService, nil, 200*time.Millisecond)
		return err == nil
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
		case <-time.After(10 * time.Second):
			r.err = errors.New("Run did not return within 10s of cancel")
		}
	})
	if r.err != nil {
		t.Errorf("configurator Run: %v", r.err)
	}
}

func apply(t *testing.T, nc *nats.Conn, req *sluicev1.ApplyRequest) (*sluicev1.ApplyResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return apiclient.Apply(ctx, nc, req)
}

func del(t *testing.T, nc *nats.Conn, kind, name string) (*sluicev1.DeleteResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	for _, x := range []struct {
		st  *store.Store[*sluicev1.Revision]
		dst map[string]uint64
	}{
		{store.New(env.Buckets.Intents, func() *sluicev1.Revision { return &sluicev1.Revision{} }), s.intents},
		{store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} }), s.revisions},
	} {
		keys, err := x.st.Keys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			e, err := x.st.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			x.dst[k] = e.Revision
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
	natstest.Eventually(t, 5*time.Second, "events", func() bool {
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
