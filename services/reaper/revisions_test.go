package reaper_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/reaper"
)

// Revisions beyond the retention are deleted unless something references
// them: the head, last-applied, a rollout record, a node's config.
func TestReaper_CollectRevisions_KeepsTheNewestAndTheReferenced(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	ctx := context.Background()
	b := f.env.Buckets
	revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	createRevisions(t, ctx, revs, "r1", "r2", "r3", "r4", "r5", "r6")
	if _, err := store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead, &sluicev1.Head{Revision: "r5", Generation: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "4-r4", Revision: "r4", Generation: 4}); err != nil {
		t.Fatal(err)
	}
	// The coordinator has started the head (its rollout runs).
	if _, err := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyActive, &sluicev1.RolloutRef{Rollout: "5-r5", Revision: "r5", Generation: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }).Create(ctx, "4-r4",
		&sluicev1.Rollout{Id: "4-r4", Revision: "r4", PreviousRevision: "r2", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.configs.Create(ctx, contract.DesiredKey("n1"), formed(&sluicev1.DesiredConfig{Node: "n1", Revision: "r3", Fingerprint: "fp"})); err != nil {
		t.Fatal(err)
	}
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: f.env.Settings, RevisionRetention: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CollectRevisions(ctx); err != nil {
		t.Fatal(err)
	}
	got := storedRevisions(t, ctx, revs)
	// r6: the newest (retention 1); r5 head, r4 last-applied, r2 a record's previous, r3 n1's config.
	if want := []string{"r2", "r3", "r4", "r5", "r6"}; !slices.Equal(got, want) {
		t.Fatalf("revisions %v; want %v (r1 collected)", got, want)
	}
	waitEvents(t, f, contract.KindRevision, "r1", reaper.EventRevisionsReaped, 1)
}

// A value that says what is in use but does not decode stops the
// collection of revisions and marked intents (what it references is
// unknown). It used to be an error logged at every pass; it is reported
// once per stored revision with ValueUnreadable naming it, and the
// collection resumes once the value is readable or gone.
func TestReaper_Collect_UnreadableReference_NothingCollectedAndReportedOnce(t *testing.T) {
	tests := []struct {
		name, bucket, key string
		blocksIntents     bool // rollout records say nothing about intents
	}{
		{"a rollout record", contract.BucketRollouts, "4-r4", false},
		{"a node config", contract.BucketNodeConfigs, contract.DesiredKey("n1"), true},
		{"the head", contract.BucketRevisions, contract.KeyHead, true},
		{"the last-applied rollout", contract.BucketRollouts, contract.KeyLastApplied, true},
	}
	for _, tt := range tests {
		for _, g := range garbage[:2] { // a value of another type decodes: it references nothing
			t.Run(tt.name+"/"+g.name, func(t *testing.T) {
				f := newFleet(t, contract.DefaultSettings())
				ctx := context.Background()
				b := f.env.Buckets
				revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
				createRevisions(t, ctx, revs, "r1", "r2", "r3")
				marked := &sluicev1.StoredIntent{MarkedForDeletion: true,
					Intent: &sluicev1.Intent{Name: "gone", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 7}}}}
				if _, err := store.New(b.Intents, func() *sluicev1.StoredIntent { return &sluicev1.StoredIntent{} }).Create(ctx, "routingtable.gone", marked); err != nil {
					t.Fatal(err)
				}
				f.putRaw(t, tt.bucket, tt.key, []byte(g.value))
				r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: f.env.Settings, RevisionRetention: 1})
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := r.CollectRevisions(ctx); err != nil {
						t.Fatalf("CollectRevisions: %v", err)
					}
					if err := r.CollectIntents(ctx); err != nil {
						t.Fatalf("CollectIntents: %v", err)
					}
				}
				if keys, err := revs.Keys(ctx); err != nil || !slices.Contains(keys, "r1") {
					t.Fatalf("revisions %v (%v): want r1 kept", keys, err)
				}
				if _, err := f.env.Buckets.Intents.Get(ctx, "routingtable.gone"); (err == nil) != tt.blocksIntents {
					t.Fatalf("marked intent: %v; want it kept: %v", err, tt.blocksIntents)
				}
				ev := waitEvents(t, f, contract.KindQuarantine, tt.bucket+"."+tt.key, events.TypeValueUnreadable, 1)[0]
				if !strings.Contains(ev.GetReason(), tt.bucket+"/"+tt.key) {
					t.Errorf("reason %q does not name %s/%s", ev.GetReason(), tt.bucket, tt.key)
				}

				// Fixed by hand: a readable head (the fence of the deletes), the rest removed.
				kv, err := f.env.JS.KeyValue(ctx, tt.bucket)
				if err != nil {
					t.Fatal(err)
				}
				if tt.key == contract.KeyHead {
					head, _ := store.Marshal(&sluicev1.Head{Revision: "r3", Generation: 3})
					f.putRaw(t, tt.bucket, tt.key, head)
					// ... and its rollout started: nothing waits for the coordinator.
					if _, err := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyLastApplied,
						&sluicev1.RolloutRef{Rollout: "3-r3", Revision: "r3", Generation: 3}); err != nil {
						t.Fatal(err)
					}
				} else if err := kv.Delete(ctx, tt.key); err != nil {
					t.Fatal(err)
				}
				if err := r.CollectRevisions(ctx); err != nil {
					t.Fatal(err)
				}
				if keys, err := revs.Keys(ctx); err != nil || slices.Contains(keys, "r1") {
					t.Fatalf("revisions %v (%v): want r1 collected once the value is gone", keys, err)
				}
			})
		}
	}
}

// While the coordinator has not started the head, a head just superseded
// may still be started by it: no revision is collected, though r1 is beyond
// the retention and nothing names it. Once a pointer caught up, it is.
func TestReaper_CollectRevisions_WaitsUntilTheCoordinatorStartedTheHead(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	ctx := context.Background()
	b := f.env.Buckets
	revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	createRevisions(t, ctx, revs, "r1", "r2", "r3")
	if _, err := store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead, &sluicev1.Head{Revision: "r3", Generation: 3}); err != nil {
		t.Fatal(err)
	}
	refs := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} })
	applied, err := refs.Create(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "1-r2", Revision: "r2", Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: f.env.Settings, RevisionRetention: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CollectRevisions(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := storedRevisions(t, ctx, revs), []string{"r1", "r2", "r3"}; !slices.Equal(got, want) {
		t.Fatalf("behind the head: revisions %v; want %v (nothing collected)", got, want)
	}
	if _, err := refs.Update(ctx, contract.KeyLastApplied, &sluicev1.RolloutRef{Rollout: "3-r3", Revision: "r3", Generation: 3}, applied); err != nil {
		t.Fatal(err)
	}
	if err := r.CollectRevisions(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := storedRevisions(t, ctx, revs), []string{"r3"}; !slices.Equal(got, want) {
		t.Fatalf("caught up: revisions %v; want %v", got, want)
	}
}

// storedRevisions lists the revision keys in revs, sorted (not the head,
// not a control key).
func storedRevisions(t *testing.T, ctx context.Context, revs *store.Store[*sluicev1.Revision]) []string {
	t.Helper()
	keys, err := revs.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range keys {
		if !contract.IsControlKey(k) && k != contract.KeyHead {
			got = append(got, k)
		}
	}
	slices.Sort(got)
	return got
}

// The node configs (two per node: the fleet) are read only when the head,
// the rollout pointers and the records leave an old revision unreferenced:
// a pass that can delete nothing costs nothing that grows with the fleet.
// Seen through a node config holding garbage: such a pass never notices
// it; once a revision is left unreferenced, the pass reads the configs,
// reports the garbage and deletes nothing.
func TestReaper_CollectRevisions_ReadsNodeConfigsOnlyWithSomethingToDelete(t *testing.T) {
	f := newFleet(t, contract.DefaultSettings())
	ctx := context.Background()
	b := f.env.Buckets
	revs := store.New(b.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	createRevisions(t, ctx, revs, "r1", "r2", "r3")
	if _, err := store.New(b.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Create(ctx, contract.KeyHead, &sluicev1.Head{Revision: "r3", Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(b.Rollouts, func() *sluicev1.RolloutRef { return &sluicev1.RolloutRef{} }).Create(ctx, contract.KeyLastApplied,
		&sluicev1.RolloutRef{Rollout: "3-r3", Revision: "r3", Generation: 3}); err != nil {
		t.Fatal(err)
	}
	records := store.New(b.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	rec := &sluicev1.Rollout{Id: "3-r3", Revision: "r3", PreviousRevision: "r2", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED}
	if _, err := records.Create(ctx, "3-r3", rec); err != nil {
		t.Fatal(err)
	}
	r2Rev, err := records.Create(ctx, "2-r2", &sluicev1.Rollout{Id: "2-r2", Revision: "r2", PreviousRevision: "r1", Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED})
	if err != nil {
		t.Fatal(err)
	}
	f.putRaw(t, contract.BucketNodeConfigs, contract.DesiredKey("n1"), []byte("{not json"))
	var logs strings.Builder
	r, err := reaper.New(reaper.Config{Conn: f.env.Conn, Settings: f.env.Settings, RevisionRetention: 1, Log: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	// r3 the newest, the head and last-applied; r2 and r1 named by records.
	if err := r.CollectRevisions(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), contract.DesiredKey("n1")) {
		t.Fatalf("a pass with nothing to delete read the node configs:\n%s", logs.String())
	}
	if got := storedRevisions(t, ctx, revs); !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Fatalf("revisions %v; want all three kept", got)
	}

	// The record naming r1 goes (record retention): r1 is unreferenced as
	// far as the records tell, so the node configs are read.
	if err := records.Delete(ctx, "2-r2", r2Rev); err != nil {
		t.Fatal(err)
	}
	if err := r.CollectRevisions(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), contract.DesiredKey("n1")) {
		t.Fatalf("the pass did not read the node configs (the garbage in n1's is not reported):\n%s", logs.String())
	}
	if got := storedRevisions(t, ctx, revs); !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Fatalf("revisions %v; want all three kept (what n1's config references is unknown)", got)
	}
}

// createRevisions stores a revision for each id, created an hour apart in
// that order (the retention keeps the newest).
func createRevisions(t *testing.T, ctx context.Context, revs *store.Store[*sluicev1.Revision], ids ...string) {
	t.Helper()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range ids {
		if _, err := revs.Create(ctx, id, &sluicev1.Revision{Id: id, CreatedAt: timestamppb.New(t0.Add(time.Duration(i) * time.Hour))}); err != nil {
			t.Fatal(err)
		}
	}
}
