package configurator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// markWatch records every intent the intents bucket ever holds marked for
// deletion while the test runs.
type markWatch struct {
	mu     sync.Mutex
	marked []string
}

func watchMarks(t *testing.T, env *natstest.Env) *markWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := intentsStore(env).Watch(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	w := &markWatch{}
	go func() {
		for e := range ch {
			if e.Value.GetMarkedForDeletion() {
				w.mu.Lock()
				w.marked = append(w.marked, e.Key)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *markWatch) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.marked)
}

// Issue 19's reproduction: a Redis registry owning tenant-y, tenant-z and
// tenant-v restarts empty, then its keys come back one by one. The empty
// answer and the one with 1 of 3 are held; the one with 2 of 3 only makes
// tenant-v pending (the default settle period, 30s here); the full answer
// cancels that. No intent is ever marked for deletion: watched in the
// intents bucket and in the events through the whole trickle. Then a key
// really removed is pending until an operator confirms it, at once.
func TestRedisRegistry_KeysTrickleBack_NothingMarked(t *testing.T) {
	rds := redistest.Start(t, redistest.WithNotifyKeyspaceEvents("KA"))
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	marks := watchMarks(t, env)
	ctx := context.Background()
	rc := rds.Client()
	set := func(name string, vlan int) {
		t.Helper()
		doc := fmt.Sprintf("kind: Layer2Network\nname: %s\nspec: {vlan: %d, vni: %d}\n", name, vlan, 10000+vlan)
		if err := rc.Set(ctx, "sluice:intents:layer2network."+name, doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set("tenant-y", 100)
	set("tenant-z", 101)
	set("tenant-v", 102)
	// The default settle period: twice the 1s sync interval, at least 30s.
	start(t, env)
	addRegistry(t, env, &sluicev1.RegistrySpec{Name: "cmdb", SyncInterval: durationpb.New(time.Second),
		Source: &sluicev1.RegistrySpec_Redis{Redis: &sluicev1.RedisRegistry{Url: rds.URL()}}})
	status := func() *sluicev1.RegistryStatus { return registryStatus(t, env, "cmdb") }
	// trickle is the status, failing the test as soon as an intent was
	// marked: every wait of the trickle polls it.
	trickle := func() *sluicev1.RegistryStatus {
		t.Helper()
		if m := marks.all(); len(m) > 0 {
			t.Fatalf("intents marked for deletion during the trickle: %v (status %v)", m, status())
		}
		return status()
	}
	natstest.Eventually(t, wait, "the three intents synced", func() bool {
		st := status()
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetIntents() == 3
	})
	head := headNow(t, env)

	rds.Stop()
	natstest.Eventually(t, wait, "the registry unreachable", func() bool {
		return status().GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE
	})
	rds.Restart() // empty: nothing was saved
	natstest.Eventually(t, wait, "the empty answer held", func() bool {
		st := trickle()
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && st.GetDeclared() == 0
	})

	// One by one, each after the registry answered with the one before.
	set("tenant-y", 100)
	natstest.Eventually(t, wait, "1 of 3 held", func() bool {
		st := trickle()
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && st.GetDeclared() == 1
	})
	set("tenant-z", 101)
	natstest.Eventually(t, wait, "2 of 3: tenant-v pending, the hold released", func() bool {
		st := trickle()
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetDeclared() == 2 &&
			len(st.GetPending()) == 1 && st.GetPending()[0].GetIntent() == "layer2network/tenant-v"
	})
	set("tenant-v", 102)
	natstest.Eventually(t, wait, "3 of 3: nothing pending", func() bool {
		st := trickle()
		return st.GetDeclared() == 3 && len(st.GetPending()) == 0
	})
	natstest.Eventually(t, wait, "RegistryDeletionPending and RegistryDeletionCancelled", func() bool {
		return len(evs.ofType("RegistryDeletionPending")) == 1 && len(evs.ofType("RegistryDeletionCancelled")) == 1
	})
	if r := evs.ofType("RegistryDeletionPending")[0].GetReason(); !strings.Contains(r, "layer2network/tenant-v at ") {
		t.Errorf("RegistryDeletionPending %q does not say when tenant-v would be marked", r)
	}
	if r := evs.ofType("RegistryDeletionCancelled")[0].GetReason(); !strings.Contains(r, "the answer that dropped it was partial") {
		t.Errorf("RegistryDeletionCancelled %q does not say why", r)
	}
	// A quick look first; the watches may lag the status, so the proof is
	// at the end: each watch delivers in the order of writes, so a mark
	// made during the trickle would come before the confirmed one.
	if m := marks.all(); len(m) > 0 {
		t.Fatalf("intents marked for deletion during the trickle: %v", m)
	}
	if e := evs.ofType("IntentMarkedForDeletion"); len(e) > 0 {
		t.Fatalf("IntentMarkedForDeletion during the trickle: %v", e)
	}
	if h := headNow(t, env); h.GetGeneration() != head.GetGeneration() {
		t.Fatalf("the head moved during the trickle: %v, was %v", h, head)
	}

	// Really removed: pending until confirmed, then marked at once.
	if err := rc.Del(ctx, "sluice:intents:layer2network.tenant-v").Err(); err != nil {
		t.Fatal(err)
	}
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "tenant-v pending again", func() bool {
		st = status()
		return len(st.GetPending()) == 1 && st.GetPendingDigest() != ""
	})
	confirms := store.New(env.Buckets.Control, func() *sluicev1.RegistryConfirm { return &sluicev1.RegistryConfirm{} })
	if _, err := confirms.Create(ctx, contract.RegistryConfirmKey("cmdb"), &sluicev1.RegistryConfirm{Digest: st.GetPendingDigest(), By: "test"}); err != nil {
		t.Fatal(err)
	}
	waitStored(t, env, "layer2network.tenant-v", "tenant-v marked on the confirmation", func(v *sluicev1.StoredIntent) bool { return v.GetMarkedForDeletion() })
	natstest.Eventually(t, wait, "RegistryDeletionConfirmed and the confirmed mark seen by the watch", func() bool {
		return len(evs.ofType("RegistryDeletionConfirmed")) == 1 && len(evs.ofType("IntentMarkedForDeletion")) > 0 && len(marks.all()) > 0
	})
	if m := marks.all(); !slices.Equal(m, []string{"layer2network.tenant-v"}) {
		t.Errorf("marked %v over the whole test, want tenant-v once, on the confirmation", m)
	}
	if e := evs.ofType("IntentMarkedForDeletion"); len(e) != 1 {
		t.Errorf("%d IntentMarkedForDeletion events over the whole test, want 1 (the confirmed one): %v", len(e), e)
	}
}
