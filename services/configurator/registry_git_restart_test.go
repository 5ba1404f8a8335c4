package configurator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/internal/testkit/gittest"
	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// settleOneSecond: a deletion is marked one second after the answers lack it.
func settleOneSecond(c *configurator.Config) { c.DeleteAfter = new(time.Second) }

// syncAttempts waits for n more status writes of registry name, each one
// attempt of its syncer: longer than the settle period when n is 3.
func syncAttempts(t *testing.T, env *natstest.Env, name string, n int) {
	t.Helper()
	for range n {
		at := registryStatus(t, env, name).GetUpdatedAt().AsTime()
		natstest.Eventually(t, wait, "another sync attempt", func() bool {
			return registryStatus(t, env, name).GetUpdatedAt().AsTime().After(at)
		})
	}
}

// notMarked fails the test for each intent key marked for deletion.
func notMarked(t *testing.T, env *natstest.Env, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v := getStored(t, env, k); v == nil || v.GetMarkedForDeletion() {
			t.Errorf("%s is marked for deletion (or gone): %v", k, v)
		}
	}
}

// The commit in force outlives the configurator: a branch rewound to an
// older commit while no configurator ran is held by the next one, as a
// live rewind is, and nothing the older commit lacks is deleted, however
// long the settle period runs; a commit on top of the one in force then
// syncs as usual.
func TestGitRegistry_RewoundWhileDown_IsHeldByTheNextConfigurator(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	g := gittest.New(t)
	c1 := g.Commit("red", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	c2 := g.Commit("green and blue", map[string]string{"intents/green.yaml": netDoc("green", 101), "intents/blue.yaml": netDoc("blue", 102)})
	first := start(t, env, settleOneSecond)
	addRegistry(t, env, gitSpec("gitops", g.URL()))
	natstest.Eventually(t, wait, "status SYNCED at c2", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetIntents() == 3 && st.GetCommit().GetHash() == c2
	})
	first.stop(t)

	g.ForcePush(c1) // lacks green and blue
	evs := watchEvents(t, env.Conn)
	start(t, env, settleOneSecond)
	var st *sluicev1.RegistryStatus
	natstest.Eventually(t, wait, "the rewind to be held", func() bool {
		st = registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && st.GetError() != ""
	})
	if e := st.GetError(); !strings.Contains(e, "was rewound") || !strings.Contains(e, c1[:12]) || !strings.Contains(e, c2[:12]) {
		t.Errorf("held with error %q, want it to say rewound and name %s and %s", e, c1[:12], c2[:12])
	}
	if st.GetCommit().GetHash() != c2 {
		t.Errorf("commit in force while held = %s, want %s", st.GetCommit().GetHash(), c2)
	}
	syncAttempts(t, env, "gitops", 3)
	notMarked(t, env, "layer2network.red", "layer2network.green", "layer2network.blue")
	if p := registryStatus(t, env, "gitops").GetPending(); len(p) != 0 {
		t.Errorf("pending deletions while held: %v", p)
	}
	if n := len(evs.ofType("RegistryAnswerHeld")); n != 1 {
		t.Errorf("%d RegistryAnswerHeld events, want 1", n)
	}

	// A commit on top of c2: synced.
	g.Git(g.Work, "reset", "--quiet", "--hard", c2)
	c3 := g.Commit("red: vlan 110", map[string]string{"intents/red.yaml": netDoc("red", 110)})
	waitStored(t, env, "layer2network.red", "red's VLAN of c3", func(v *sluicev1.StoredIntent) bool {
		return v.GetIntent().GetLayer2Network().GetVlan() == 110
	})
	natstest.Eventually(t, wait, "status SYNCED at c3", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetError() == "" && st.GetCommit().GetHash() == c3
	})
	notMarked(t, env, "layer2network.green", "layer2network.blue")
}

// A stored status that does not decode is no evidence that the branch's
// history is new: the next configurator holds every head, says why, and
// deletes nothing; the spec stored anew (sluice registry add --update)
// accepts the branch as it is, and only then does what it lacks settle.
func TestGitRegistry_UnreadableStatus_HoldsUntilReAdded(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	g := gittest.New(t)
	c1 := g.Commit("red", map[string]string{"intents/red.yaml": netDoc("red", 100)})
	c2 := g.Commit("green", map[string]string{"intents/green.yaml": netDoc("green", 101)})
	first := start(t, env, settleOneSecond)
	spec := gitSpec("gitops", g.URL())
	addRegistry(t, env, spec)
	natstest.Eventually(t, wait, "status SYNCED at c2", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetCommit().GetHash() == c2
	})
	first.stop(t)

	g.ForcePush(c1) // lacks green
	if _, err := env.Buckets.Registries.Put(context.Background(), "gitops", []byte("\xff not a status")); err != nil {
		t.Fatal(err)
	}
	start(t, env, settleOneSecond)
	var st *sluicev1.RegistryStatus
	statuses := store.New(env.Buckets.Registries, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} })
	natstest.Eventually(t, wait, "every head to be held", func() bool {
		e, err := statuses.Get(context.Background(), "gitops") // the garbage until the configurator replaces it
		st = e.Value
		if err != nil {
			return false
		}
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && strings.Contains(st.GetError(), "not known")
	})
	if e := st.GetError(); !strings.Contains(e, "does not decode") || !strings.Contains(e, c1[:12]) || !strings.Contains(e, "--update") {
		t.Errorf("held with error %q, want it to say the status did not decode, name head %s and the way out", e, c1[:12])
	}
	if !st.GetCommitUnknown() {
		t.Error("status does not say the commit in force is unknown")
	}
	syncAttempts(t, env, "gitops", 3)
	notMarked(t, env, "layer2network.red", "layer2network.green")

	// Re-added: c1 is accepted, green settles and is marked.
	specs := store.New(env.Buckets.Control, func() *sluicev1.RegistrySpec { return &sluicev1.RegistrySpec{} })
	cur, err := specs.Get(context.Background(), contract.RegistryKey("gitops"))
	if err != nil {
		t.Fatal(err)
	}
	spec.At = timestamppb.Now()
	if _, err := specs.Update(context.Background(), contract.RegistryKey("gitops"), spec, cur.Revision); err != nil {
		t.Fatal(err)
	}
	waitStored(t, env, "layer2network.green", "green marked after the settle period", func(v *sluicev1.StoredIntent) bool { return v.GetMarkedForDeletion() })
	natstest.Eventually(t, wait, "status SYNCED at c1", func() bool {
		st := registryStatus(t, env, "gitops")
		return st.GetState() == sluicev1.RegistryState_REGISTRY_STATE_SYNCED && st.GetCommit().GetHash() == c1 && !st.GetCommitUnknown()
	})
}
