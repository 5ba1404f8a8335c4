package reaper_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/reaper"
)

func table(name string, id uint32) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id}}}
}

// A marked intent is deleted once no referenced revision contains it:
// not the head's, the active or last-applied rollout's, nor any node's
// desired or backup config's; never while an apply is in progress.
func TestReaper_CollectIntents_DeletesOnlyTheUnreferenced(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	ctx := context.Background()
	b := f.env.Buckets
	intents := store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	put := func(in *sluicev1.Intent, marked bool) {
		t.Helper()
		if _, err := intents.Create(ctx, intent.Key(in), &sluicev1.StoredIntent{Intent: in, Source: "api", MarkedForDeletion: marked}); err != nil {
			t.Fatal(err)
		}
	}
	rev := func(id string, ins ...*sluicev1.Intent) {
		t.Helper()
		if _, err := revs.Create(ctx, id, &sluicev1.Revision{Id: id, Intents: ins}); err != nil {
			t.Fatal(err)
		}
	}
	gone, inForce, onBackup, live := table("gone", 1), table("in-force", 2), table("on-backup", 3), table("live", 4)
	put(gone, true)
	put(inForce, true)
	put(onBackup, true)
	put(live, false)
	rev("rev-head", live)
	rev("rev-applied", live, inForce)
	rev("rev-old", live, onBackup, gone)
	rev("rev-older", gone)
	if _, err := store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead, &sluicev1.Head{Revision: "rev-head", Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "3-applied", Revision: "rev-applied", Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.configs.Create(ctx, contract.BackupKey("n1"), formed(&sluicev1.DesiredConfig{Node: "n1", Revision: "rev-old", Fingerprint: "fp"})); err != nil {
		t.Fatal(err)
	}
	r := f.newReaper(t, &clock{t: time.Now()})

	// The node's backup came from "rev-old", which contains gone too: kept.
	if err := r.CollectIntents(ctx); err != nil {
		t.Fatal(err)
	}
	assertIntents(t, intents, gone, inForce, onBackup, live)
	// The status endpoint says why each is kept (sluice get intents shows it).
	assertKept(t, r, map[string]string{
		intent.Key(gone):     "revision rev-old contains it, and node n1's backup config came from it: a revert may put that config back",
		intent.Key(onBackup): "revision rev-old contains it, and node n1's backup config came from it",
		intent.Key(inForce):  "revision rev-applied contains it, and it is in force (rollout 3-applied, last applied)",
	})

	// The node moves on to the head: "old" is referenced no more.
	if _, err := f.configs.Mutate(ctx, contract.BackupKey("n1"), func(*sluicev1.DesiredConfig) (*sluicev1.DesiredConfig, error) {
		return formed(&sluicev1.DesiredConfig{Node: "n1", Revision: "rev-head", Fingerprint: "fp2"}), nil
	}); err != nil {
		t.Fatal(err)
	}
	// An apply in progress holds everything: its rollback may write them back.
	journals := store.New(b.Revisions, func() *sluicev1.ApplyJournal { return &sluicev1.ApplyJournal{} })
	jrev, err := journals.Create(ctx, contract.KeyPending, &sluicev1.ApplyJournal{Source: "api"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CollectIntents(ctx); err != nil {
		t.Fatal(err)
	}
	assertIntents(t, intents, gone, inForce, onBackup, live)
	assertKept(t, r, map[string]string{intent.Key(gone): "an apply is in progress", intent.Key(onBackup): "an apply is in progress",
		intent.Key(inForce): "an apply is in progress"})
	if err := journals.Delete(ctx, contract.KeyPending, jrev); err != nil {
		t.Fatal(err)
	}
	if err := r.CollectIntents(ctx); err != nil {
		t.Fatal(err)
	}
	assertIntents(t, intents, inForce, live) // gone and on-backup collected; in-force is last-applied's
	assertKept(t, r, map[string]string{intent.Key(inForce): "it is in force (rollout 3-applied, last applied)"})
	ev := waitEvents(t, f, contract.KindIntent, intent.Key(gone), reaper.EventIntentReaped, 1)[0]
	if ev.GetReason() == "" {
		t.Fatal("IntentReaped without a reason")
	}
}

// assertKept checks that the reaper's status says why it kept exactly the
// intents of want: each reason contains want's text.
func assertKept(t *testing.T, r *reaper.Reaper, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, g := range r.Status().Kept {
		for _, k := range g.Intents {
			got[k] = g.Reason
		}
	}
	if len(got) != len(want) {
		t.Fatalf("kept %v; want %d intents", got, len(want))
	}
	for k, w := range want {
		if !strings.Contains(got[k], w) {
			t.Fatalf("kept %s because %q; want it to say %q", k, got[k], w)
		}
	}
}

func assertIntents(t *testing.T, st *store.Store[*sluicev1.StoredIntent], want ...*sluicev1.Intent) {
	t.Helper()
	keys, err := st.Keys(context.Background())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, k := range keys {
		got[k] = true
	}
	if len(got) != len(want) {
		t.Fatalf("intents %v; want %d of them", keys, len(want))
	}
	for _, in := range want {
		if !got[intent.Key(in)] {
			t.Fatalf("intents %v; want %s kept", keys, intent.Key(in))
		}
	}
}

// A coordinator that has not yet started the head may still start a head
// it read before, which may name an intent the newest head no longer has
// (added, then removed at once): until a rollout pointer has caught up with
// the head's generation, no intent is collected. On the old rule (the
// revisions of the head and the pointers only) "brief" was deleted, and the
// late rollout of generation 4 named an intent that was gone (I5; seen in
// TestI5_NothingReferencedIsEverDeleted under load).
func TestReaper_CollectIntents_WaitsUntilTheCoordinatorStartedTheHead(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	ctx := context.Background()
	b := f.env.Buckets
	intents := store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} })
	revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	heads := store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	refs := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	live, brief := table("live", 1), table("brief", 2)
	for _, in := range []*sluicev1.Intent{live, brief} {
		if _, err := intents.Create(ctx, intent.Key(in), &sluicev1.StoredIntent{Intent: in, Source: "api", MarkedForDeletion: in == brief}); err != nil {
			t.Fatal(err)
		}
	}
	for id, ins := range map[string][]*sluicev1.Intent{"rev-3": {live}, "rev-4": {live, brief}, "rev-5": {live}} {
		if _, err := revs.Create(ctx, id, &sluicev1.Revision{Id: id, Intents: ins}); err != nil {
			t.Fatal(err)
		}
	}
	// Generation 4 added brief, 5 removed it; the coordinator is still on 3.
	if _, err := heads.Create(ctx, contract.KeyHead, &sluicev1.Head{Revision: "rev-5", Generation: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := refs.Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "3-rev-3", Revision: "rev-3", Generation: 3}); err != nil {
		t.Fatal(err)
	}
	r := f.newReaper(t, &clock{t: time.Now()})
	if err := r.CollectIntents(ctx); err != nil {
		t.Fatal(err)
	}
	assertIntents(t, intents, live, brief)

	// It starts generation 4 late: brief is in use.
	active, err := refs.Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: "4-rev-4", Revision: "rev-4", Generation: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CollectIntents(ctx); err != nil {
		t.Fatal(err)
	}
	assertIntents(t, intents, live, brief)

	// It has started the head: brief is collected.
	if _, err := refs.Update(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: "5-rev-5", Revision: "rev-5", Generation: 5}, active); err != nil {
		t.Fatal(err)
	}
	if err := r.CollectIntents(ctx); err != nil {
		t.Fatal(err)
	}
	assertIntents(t, intents, live)
}
