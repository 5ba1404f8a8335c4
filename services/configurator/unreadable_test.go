package configurator_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

// garbage is what a broken writer, a hand edit or another program leaves
// in a key: bytes that are not JSON, nothing at all, and a value of another
// type, which decodes (unknown fields are dropped) as an empty value.
var garbage = []struct{ name, value string }{
	{"not json", "{not json"},
	{"zero bytes", ""},
	{"a value of another type", `{"node":"n1","phase":"NODE_PHASE_PROVISIONED","fingerprint":"abc"}`},
}

// A corrupt or foreign value in the intent an apply writes, and in the
// head, is reported with an event naming it and written over; the apply
// lands and the head's generation keeps growing. Before, an intent key
// holding a value of another type (an intent-less StoredIntent) made every
// apply of that intent roll back ("changed since the apply read it"), and
// a head of another type started generations again at 1, below the
// generation the coordinator had already rolled out, so no new head was
// rolled out until the count caught up.
func TestApply_CorruptOrForeignValue_IsReportedAndWrittenOver(t *testing.T) {
	for _, g := range garbage {
		t.Run(g.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			start(t, env)
			evs := watchEvents(t, env.Conn)
			mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
			before := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tables("extra", 9000, 1)})
			for _, key := range []string{"routingtable.target-00000"} {
				if _, err := env.Buckets.Intents.Put(ctx, key, []byte(g.value)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, []byte(g.value)); err != nil {
				t.Fatal(err)
			}

			resp, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tables("target", 9100, 1)})
			if err != nil {
				t.Fatalf("apply over the bad values: %v", err)
			}
			if !resp.GetChanged() || resp.GetGeneration() <= before.GetGeneration() {
				t.Errorf("apply = %v, want a new head above generation %d", resp, before.GetGeneration())
			}
			if h := getHead(t, env).Value; h.GetRevision() != resp.GetRevision() {
				t.Errorf("head = %v, want revision %s", h, resp.GetRevision())
			}
			// The head is reported unreadable by the apply that found it so,
			// or rewritten as it was by the configurator's watch of it
			// (repairHead), whichever came first.
			for _, want := range []struct {
				types []string
				key   string
			}{
				{[]string{"ValueUnreadable"}, contract.BucketIntents + "/routingtable.target-00000"},
				{[]string{"ValueUnreadable", "ValueRewritten"}, contract.BucketRevisions + "/" + contract.KeyHead},
			} {
				natstest.Eventually(t, wait, strings.Join(want.types, " or ")+" naming "+want.key, func() bool {
					for _, typ := range want.types {
						for _, ev := range evs.ofType(typ) {
							if strings.HasPrefix(ev.GetReason(), want.key+" ") {
								return true
							}
						}
					}
					return false
				})
			}
		})
	}
}

// The record of the head's rollout that does not decode is taken for an
// ended rollout, as the coordinator takes it (it never runs that rollout
// again): applying the head's intents again rolls them out again, with an
// event naming the record. It used to answer 503 "retry" for as long as
// the record stayed unreadable.
func TestApply_SameIntentsAgain_UnreadableRolloutRecord_RollsOutAgain(t *testing.T) {
	for _, g := range garbage[:2] { // a value of another type decodes: a rollout in no phase
		t.Run(g.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			start(t, env)
			evs := watchEvents(t, env.Conn)
			first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
			id := contract.RolloutID(first.GetGeneration(), first.GetRevision())
			if _, err := env.Buckets.Rollouts.Put(context.Background(), id, []byte(g.value)); err != nil {
				t.Fatal(err)
			}

			again, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
			if err != nil {
				t.Fatalf("apply the same intents again: %v", err)
			}
			if !again.GetChanged() || again.GetRevision() != first.GetRevision() || again.GetGeneration() != first.GetGeneration()+1 {
				t.Errorf("apply = %v, want revision %s rolled out again at generation %d", again, first.GetRevision(), first.GetGeneration()+1)
			}
			natstest.Eventually(t, wait, "ValueUnreadable naming the record", func() bool {
				for _, ev := range evs.ofType("ValueUnreadable") {
					if strings.HasPrefix(ev.GetReason(), contract.BucketRollouts+"/"+id+" ") {
						return true
					}
				}
				return false
			})
		})
	}
}

// Retry and undo read the rollout records too: a record of the head's
// rollout that does not decode is taken for an ended rollout and may be
// retried; an unreadable last-applied pointer makes an undo ask for
// --to-revision. Both used to answer 503 "retry" for as long as the value
// stayed unreadable.
func TestRetryAndUndo_UnreadableRolloutRecords_AreReportedNotRetriedForEver(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	start(t, env)
	evs := watchEvents(t, env.Conn)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	id := contract.RolloutID(first.GetGeneration(), first.GetRevision())
	if _, err := env.Buckets.Rollouts.Put(ctx, id, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	retried, err := apiclient.Retry(ctx, env.Conn, &sluicev1.RetryRequest{})
	if err != nil || retried.GetRetries() != id || retried.GetGeneration() != first.GetGeneration()+1 {
		t.Fatalf("retry = %v, %v; want rollout %s retried at generation %d", retried, err, id, first.GetGeneration()+1)
	}

	if _, err := env.Buckets.Rollouts.Put(ctx, contract.KeyLastApplied, nil); err != nil {
		t.Fatal(err)
	}
	_, err = apiclient.Undo(ctx, env.Conn, &sluicev1.UndoRequest{})
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeConflict || !strings.Contains(ae.Description, contract.BucketRollouts+"/"+contract.KeyLastApplied+" does not decode") ||
		!strings.Contains(ae.Description, "--to-revision") {
		t.Fatalf("undo error = %v, want a 409 naming the unreadable pointer and --to-revision", err)
	}
	natstest.Eventually(t, wait, "a ValueUnreadable event for each", func() bool {
		return len(evs.ofType("ValueUnreadable")) == 2
	})
}

// An intent whose stored value turns unreadable keeps its version in force:
// the next revision the configurator cuts (an apply of another intent, a
// restart) holds it as the head's revision did. It used to be left out,
// and the rollout of that revision removed it from every node (chaos seeds
// 20, 36, 113, 116, 158: invariant I8).
func TestUnreadableIntent_KeepsItsVersionInForce(t *testing.T) {
	for _, g := range garbage {
		t.Run(g.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			r := start(t, env)
			ins := examples(t)
			first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
			if _, err := env.Buckets.Intents.Put(ctx, "layer2network.tenant-a", []byte(g.value)); err != nil {
				t.Fatal(err)
			}
			extra := tables("extra", 9000, 1)
			resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: extra})
			rev := getRevision(t, env, resp.GetRevision())
			if want := render.RevisionID(append(slices.Clone(ins), extra...)); resp.GetRevision() != want {
				t.Fatalf("revision %s holds %d intents; want %s: the examples (layer2network/tenant-a as in force) and the new one",
					render.Short(resp.GetRevision()), len(rev.GetIntents()), render.Short(want))
			}
			r.stop(t)
			start(t, env)
			if h := getHead(t, env).Value; h.GetRevision() != resp.GetRevision() {
				t.Fatalf("after a restart the head is %s (generation %d), want %s still (first %s)", render.Short(h.GetRevision()),
					h.GetGeneration(), render.Short(resp.GetRevision()), render.Short(first.GetRevision()))
			}
		})
	}
}

// The head is the configurator's own key: garbage written over it while
// the configurator runs is replaced at once by the head it last wrote, at
// the same generation. Before, the coordinator skipped the unreadable head
// and the rollout the head named never started (chaos seed 172: I2).
func TestUnreadableHead_IsWrittenAgainAsItWas(t *testing.T) {
	for _, g := range garbage {
		t.Run(g.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			start(t, env)
			evs := watchEvents(t, env.Conn)
			first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
			if _, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, []byte(g.value)); err != nil {
				t.Fatal(err)
			}
			natstest.Eventually(t, wait, "the head written again", func() bool {
				e, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(ctx, contract.KeyHead)
				return err == nil && e.Value.GetRevision() == first.GetRevision() && e.Value.GetGeneration() == first.GetGeneration()
			})
			natstest.Eventually(t, wait, "a ValueRewritten event for the head", func() bool {
				for _, ev := range evs.ofType("ValueRewritten") {
					if ev.GetBucket() == contract.BucketRevisions && ev.GetKey() == contract.KeyHead {
						return true
					}
				}
				return false
			})
		})
	}
}

// Garbage over the head while the control plane is paused: the repair the
// watch asks for waits for the resume, and the resume makes it (before, the
// resume only reconciled, which leaves an unreadable head where it is, and
// the coordinator never rolled out what the head named).
func TestUnreadableHead_WhilePaused_IsWrittenAgainAtResume(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start(t, env, func(c *configurator.Config) { c.Instance = "c1" })
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	reqs := store.New(env.Buckets.Control, func() *sluicev1.PauseRequest { return &sluicev1.PauseRequest{} })
	pauseRev, err := reqs.Create(ctx, contract.KeyPause, &sluicev1.PauseRequest{Paused: true, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	insts := store.New(env.Buckets.Instances, func() *sluicev1.Instance { return &sluicev1.Instance{} })
	natstest.Eventually(t, wait, "the configurator to acknowledge the pause", func() bool {
		e, err := insts.Get(ctx, contract.InstanceKey(configurator.Component, "c1"))
		return err == nil && e.Value.GetPause().GetGeneration() == 1 && e.Value.GetPause().GetPaused()
	})
	if _, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, []byte("[]")); err != nil {
		t.Fatal(err)
	}
	heads := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} })
	time.Sleep(300 * time.Millisecond) // the watch saw it; the pause holds the repair
	if _, err := heads.Get(ctx, contract.KeyHead); !errors.Is(err, store.ErrUndecodable) {
		t.Fatalf("the head was written while paused (err %v): the pause should hold the repair", err)
	}
	if _, err := reqs.Update(ctx, contract.KeyPause, &sluicev1.PauseRequest{Paused: false, Generation: 2}, pauseRev); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, wait, "the head written again at resume", func() bool {
		e, err := heads.Get(ctx, contract.KeyHead)
		return err == nil && e.Value.GetRevision() == first.GetRevision() && e.Value.GetGeneration() == first.GetGeneration()
	})
}

// An unreadable stored intent and an unreadable head at a configurator's
// start: the version of the intent in force cannot be read (the head, which
// names its revision, cannot be), so no revision is cut, and an apply that
// does not overwrite it is refused, naming it. Before, the start-up
// reconcile took the unreadable head for no head, cut a revision from the
// readable intents alone and moved the head to it: its rollout removed the
// intent from every node (chaos seed 1272: I8).
func TestRun_UnreadableIntentAndHead_CutsNoRevisionWithoutTheIntent(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	r.stop(t)
	if _, err := env.Buckets.Intents.Put(ctx, "routingtable.storage", []byte("")); err != nil {
		t.Fatal(err)
	}
	spoiled, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, env) // answers once its start-up reconcile ran

	_, err = apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tables("extra", 9000, 1)})
	if err == nil || !strings.Contains(err.Error(), "routingtable/storage") || !strings.Contains(err.Error(), "no revision is cut") {
		t.Fatalf("apply: %v; want it refused, naming routingtable/storage, whose version in force cannot be read", err)
	}
	e, err := env.Buckets.Revisions.Get(ctx, contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != spoiled {
		t.Fatalf("the head was written (KV revision %d, value %s) over the unreadable one (%d); want no revision cut without routingtable/storage",
			e.Revision(), e.Value(), spoiled)
	}
}

// Garbage in a stored intent's key and over the head's revision, at a
// configurator's start. A revision's id is the hash of its intents, so
// when the readable stored intents hash to the head's revision, that
// revision is exactly them: garbage in a key no intent was stored under
// (a fresh key) has no version in force, and the configurator rewrites the
// head's revision and cuts the next one from the readable intents. Garbage
// over an intent that was stored leaves them short of the head's revision:
// its version in force cannot be read, and no revision is cut (seed 1272).
// Before, the fresh key's garbage was taken for an intent whose version in
// force could not be read: the head's revision was never rewritten and
// every apply was refused until someone deleted a key nobody had applied
// (chaos seed 665: I2, change 2 not accepted within a minute).
func TestRun_UnreadableIntentAndHeadRevision_FreshKeyHasNoVersionInForce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       string // the intent key spoiled
		wantApply bool
	}{
		{"garbage in a fresh key: the revision is rewritten and the apply lands", "routingtable.chaos-704", true},
		{"garbage over a stored intent: the apply is refused, naming it", "routingtable.storage", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := natstest.Start(t, contract.DefaultSettings())
			ctx := context.Background()
			r := start(t, env)
			ins := examples(t)
			first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
			r.stop(t)
			foreign := `{"node":"node-01","labels":{"rack":"rack-1"},"agentVersion":"chaos"}` // a node's presence
			if _, err := env.Buckets.Intents.Put(ctx, tc.key, []byte(foreign)); err != nil {
				t.Fatal(err)
			}
			if _, err := env.Buckets.Revisions.Put(ctx, first.GetRevision(), []byte(`{"id":"cut in ha`)); err != nil {
				t.Fatal(err)
			}
			start(t, env) // answers once its start-up reconcile ran

			extra := tables("extra", 9000, 1)
			resp, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: extra})
			if !tc.wantApply {
				if err == nil || !strings.Contains(err.Error(), "routingtable/storage") || !strings.Contains(err.Error(), "no revision is cut") {
					t.Fatalf("apply: %v (revision %s); want it refused, naming routingtable/storage, whose version in force cannot be read",
						err, render.Short(resp.GetRevision()))
				}
				return
			}
			if err != nil {
				t.Fatalf("apply: %v; want it to land: %s was never an intent, so nothing of it is in force", err, tc.key)
			}
			if rev := getRevision(t, env, first.GetRevision()); len(rev.GetIntents()) != len(ins) {
				t.Fatalf("the head's revision %s rewritten with %d intents, want %d", render.Short(first.GetRevision()), len(rev.GetIntents()), len(ins))
			}
			if want := render.RevisionID(append(slices.Clone(ins), extra...)); resp.GetRevision() != want {
				t.Fatalf("revision %s, want %s: the examples and the new one", render.Short(resp.GetRevision()), render.Short(want))
			}
		})
	}
}

// A configurator started over a head that does not decode writes it again
// from the newest rollout's record when the stored intents are that
// rollout's revision: the same revision, generation, strategy and source,
// so no coordinator starts the change again. It used to cut a new generation of
// the same revision with no strategy: the change rolled out again, with
// the default strategy in place of the operator's.
func TestRestart_UnreadableHead_WrittenAgainFromTheRolloutRecord(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	c1 := start(t, env)
	strategy := &sluicev1.Strategy{MaxParallel: "1", FirstWave: 1, WaveGrowth: 3}
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t), Strategy: strategy})
	h := getHead(t, env).Value
	// The record's source (as a git registry's sync would have left it) comes back too.
	src := &sluicev1.Source{Registry: "gitops", Commit: &sluicev1.GitCommit{Hash: "0123456789abcdef", Subject: "add red"}}
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	id := contract.RolloutID(first.GetGeneration(), first.GetRevision())
	if _, err := rollouts.Create(ctx, id, &sluicev1.Rollout{
		Id: id, Revision: first.GetRevision(), Generation: first.GetGeneration(), Strategy: h.GetStrategy(),
		Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING, Source: src,
	}); err != nil {
		t.Fatal(err)
	}
	c1.stop(t)
	if _, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	start(t, env)
	got := readableHead(t, env)
	if got.GetRevision() != first.GetRevision() || got.GetGeneration() != first.GetGeneration() {
		t.Errorf("head = revision %s generation %d, want revision %s generation %d (rollout %s's, not a new one)",
			render.Short(got.GetRevision()), got.GetGeneration(), render.Short(first.GetRevision()), first.GetGeneration(), id)
	}
	if !proto.Equal(got.GetStrategy(), h.GetStrategy()) {
		t.Errorf("head strategy = %v, want the operator's %v", got.GetStrategy(), h.GetStrategy())
	}
	if !proto.Equal(got.GetSource(), src) {
		t.Errorf("head source = %v, want the record's %v", got.GetSource(), src)
	}
}

// When the stored intents are not the newest rollout's revision, the head
// that moved after it is gone with its strategy: the configurator cuts the
// next generation above every one the head can have had, and its reason
// says the strategy is the default because the head's was unreadable.
func TestRestart_UnreadableHeadAheadOfEveryRollout_NextGenerationSaysTheStrategyIsLost(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	c1 := start(t, env)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	rollouts := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	id := contract.RolloutID(first.GetGeneration(), first.GetRevision())
	if _, err := rollouts.Create(ctx, id, &sluicev1.Rollout{
		Id: id, Revision: first.GetRevision(), Generation: first.GetGeneration(),
		Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED,
	}); err != nil {
		t.Fatal(err)
	}
	second := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tables("extra", 9000, 1), Strategy: &sluicev1.Strategy{MaxParallel: "1"}})
	c1.stop(t)
	garbageAt, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, env)
	got := readableHead(t, env)
	if got.GetRevision() != second.GetRevision() || got.GetGeneration() <= garbageAt {
		t.Errorf("head = revision %s generation %d, want revision %s above generation %d",
			render.Short(got.GetRevision()), got.GetGeneration(), render.Short(second.GetRevision()), garbageAt)
	}
	if !got.GetStrategyLost() || !strings.Contains(got.GetReason(), "strategy") {
		t.Errorf("head reason = %q, want it and strategy_lost to say the head's strategy was lost", got.GetReason())
	}
}

// readableHead waits until the head decodes again and returns it.
func readableHead(t *testing.T, env *natstest.Env) *sluicev1.Head {
	t.Helper()
	var got *sluicev1.Head
	natstest.Eventually(t, wait, "a readable head", func() bool {
		e, err := store.New(env.Buckets.Revisions, func() *sluicev1.Head { return &sluicev1.Head{} }).Get(context.Background(), contract.KeyHead)
		got = e.Value
		return err == nil
	})
	return got
}
