package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/creds"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
	"github.com/sluicehq/sluice/services/reaper"
)

// netDoc is a layer2 network as a registry document.
func netDoc(name string, vlan int) string {
	return fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: {vlan: %d, vni: %d}\n", name, vlan, 10000+vlan)
}

// fastReaper replaces the system's reaper with one that passes every 300ms.
func (s *system) fastReaper() {
	s.halt("reaper")
	rp, err := reaper.New(reaper.Config{Conn: s.env.ConnectRole(s.t, creds.RoleReaper, ""), Settings: s.env.Settings, Log: zerolog.Nop(), Interval: 300 * time.Millisecond})
	if err != nil {
		s.t.Fatal(err)
	}
	s.run("reaper", rp.Run)
}

// deletingAfter replaces the system's configurator with one that marks
// an intent missing from a registry's answers once every answer lacked it
// for d (the settle period), so that a test need not wait the default.
func (s *system) deletingAfter(d time.Duration) {
	s.halt("configurator")
	cfgr, err := configurator.New(configurator.Config{Conn: s.env.ConnectRole(s.t, creds.RoleConfigurator, ""), Settings: s.env.Settings,
		Log: zerolog.Nop(), DeleteAfter: &d})
	if err != nil {
		s.t.Fatal(err)
	}
	s.run("configurator", cfgr.Run)
}

// eventTypes records the type and id of every event published from now on,
// in the order they arrive (one publisher per component: in its order).
type eventTypes struct {
	mu  sync.Mutex
	got []string // "Type id"
}

func recordEvents(t *testing.T, env *natstest.Env) *eventTypes {
	t.Helper()
	l := &eventTypes{}
	sub, err := env.Conn.Subscribe(contract.EventsSubjectPrefix+".>", func(m *nats.Msg) {
		ev := &sluicev1.Event{}
		if store.Unmarshal(m.Data, ev) == nil {
			l.mu.Lock()
			l.got = append(l.got, ev.GetType()+" "+ev.GetId())
			l.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := env.Conn.Flush(); err != nil { // the server has the interest before anything is published
		t.Fatal(err)
	}
	return l
}

// index is where "Type id" first arrived, -1 if it did not.
func (l *eventTypes) index(typeAndID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Index(l.got, typeAndID)
}

func registryState(t *testing.T, env *natstest.Env, name string) *sluicev1.RegistryStatus {
	t.Helper()
	e, err := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }).Get(context.Background(), name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return e.Value
}

func storedIntent(t *testing.T, env *natstest.Env, key string) *sluicev1.StoredIntent {
	t.Helper()
	e, err := store.New(env.Buckets.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).Get(context.Background(), key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return e.Value
}

func headOf(t *testing.T, env *natstest.Env) *sluicev1.Head {
	t.Helper()
	e, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	return e.Value
}

// assertNothingReferencedDeleted is I5 at this moment (see referencesNow).
func assertNothingReferencedDeleted(t *testing.T, env *natstest.Env) {
	t.Helper()
	for _, v := range referencesNow(t, env) {
		t.Errorf("I5: %s", v)
	}
}

// Redis as a registry, through the whole system: an outage changes
// nothing, an empty answer is held, an intent removed from Redis is
// pending, then marked once every answer lacked it for the settle period,
// rolled off the nodes and, once nothing references it, reaped.
func TestRedisRegistry_OutageHoldMarkRollOffReap(t *testing.T) {
	rds := redistest.Start(t, redistest.WithNotifyKeyspaceEvents("KA"))
	env := natstest.Start(t, contract.DefaultSettings())
	evs := recordEvents(t, env)
	s := startSystem(t, env, t.TempDir(), 4, nil)
	s.fastReaper()
	s.deletingAfter(2 * time.Second) // two answers or so at the 1s sync interval
	waitRegistered(t, env, 4)
	ctx := context.Background()
	rc := rds.Client()
	set := func(name string, vlan int) {
		t.Helper()
		if err := rc.Set(ctx, "sluice:intents:layer2network."+name, netDoc(name, vlan), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set("red", 100)
	set("green", 101)
	set("blue", 102)
	specs := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	if _, err := specs.Create(ctx, contract.RegistryKey("cmdb"), &sluicev1.RegistrySpec{Name: "cmdb", SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: rds.URL()}}}); err != nil {
		t.Fatal(err)
	}
	var h1 *sluicev1.Head
	natstest.Eventually(t, 60*time.Second, "the registry's three networks to be the head", func() bool {
		h1 = headOf(t, env)
		return h1 != nil && storedIntent(t, env, "layer2network.blue") != nil
	})
	r1 := waitRolloutEnd(t, env, h1.GetGeneration(), 60*time.Second)
	if r1.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("first rollout %s: %s", r1.GetPhase(), r1.GetReason())
	}

	// Redis stops: unreachable, and nothing is marked or moved.
	rds.Stop()
	natstest.Eventually(t, 60*time.Second, "the registry to be unreachable", func() bool {
		return registryState(t, env, "cmdb").GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE
	})
	if st := registryState(t, env, "cmdb"); st.GetUnreachableSince() == nil || st.GetError() == "" {
		t.Fatalf("unreachable status without since or error: %v", st)
	}
	// Redis comes back empty (it keeps nothing on disk here): held.
	rds.Restart()
	natstest.Eventually(t, 60*time.Second, "the empty answer to be held", func() bool {
		return registryState(t, env, "cmdb").GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD
	})
	for _, n := range []string{"red", "green", "blue"} {
		if v := storedIntent(t, env, "layer2network."+n); v.GetMarkedForDeletion() {
			t.Fatalf("%s was marked by an outage or an empty answer", n)
		}
	}
	if h := headOf(t, env); h.GetGeneration() != h1.GetGeneration() {
		t.Fatalf("the head moved during the outage: %v", h)
	}

	// Two of three come back: the hold released, green pending, then
	// marked once the answers lacked it for the settle period.
	set("red", 100)
	set("blue", 102)
	natstest.Eventually(t, 60*time.Second, "green to be marked", func() bool {
		return storedIntent(t, env, "layer2network.green").GetMarkedForDeletion()
	})
	natstest.Eventually(t, 60*time.Second, "green's IntentMarkedForDeletion event", func() bool {
		return evs.index("IntentMarkedForDeletion layer2network.green") >= 0
	})
	if p, m := evs.index("RegistryDeletionPending cmdb"), evs.index("IntentMarkedForDeletion layer2network.green"); p < 0 || p > m {
		t.Fatalf("green marked without being pending first (RegistryDeletionPending at %d, marked at %d)", p, m)
	}
	// The status is written after the sync's commit moved the head: once
	// it counts green marked and nothing pending, the head is without it.
	// (Green's mark alone is not enough: it is stored before the head moves.)
	natstest.Eventually(t, 60*time.Second, "the hold released and green's deletion committed", func() bool {
		st := registryState(t, env, "cmdb")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetHeld() == nil &&
			len(st.GetPending()) == 0 && st.GetMarked() == 1
	})
	h2 := headOf(t, env)
	r2 := waitRolloutEnd(t, env, h2.GetGeneration(), 60*time.Second)
	if r2.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("rollout without green %s: %s", r2.GetPhase(), r2.GetReason())
	}
	assertNothingReferencedDeleted(t, env)
	// The nodes' backups still come from the revision with green: it stays.
	// Proves a negative: 1s is three passes of the 300ms reaper, each of
	// which would have reaped green were it unreferenced.
	time.Sleep(time.Second)
	if storedIntent(t, env, "layer2network.green") == nil {
		t.Fatalf("green was reaped while the nodes' backups still hold it")
	}

	// One more change moves the backups past green: now it is reaped.
	set("cyan", 103)
	var h3 *sluicev1.Head
	natstest.Eventually(t, 60*time.Second, "cyan to be the head", func() bool {
		h3 = headOf(t, env)
		return h3.GetGeneration() > h2.GetGeneration()
	})
	r3 := waitRolloutEnd(t, env, h3.GetGeneration(), 60*time.Second)
	if r3.GetPhase() != sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED {
		t.Fatalf("rollout with cyan %s: %s", r3.GetPhase(), r3.GetReason())
	}
	natstest.Eventually(t, 60*time.Second, "green to be reaped", func() bool {
		return storedIntent(t, env, "layer2network.green") == nil
	})
	assertInvariants(t, s, r3)
	assertNothingReferencedDeleted(t, env)
	natstest.Eventually(t, 60*time.Second, "the status to count 3 intents and none marked", func() bool {
		st := registryState(t, env, "cmdb")
		return st.GetIntents() == 3 && st.GetMarked() == 0
	})
	rev := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	e, err := rev.Get(ctx, h3.GetRevision())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range e.Value.GetIntents() {
		names = append(names, in.GetName())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"blue", "cyan", "red"}) {
		t.Errorf("head revision holds %v, want blue, cyan, red", names)
	}
}
