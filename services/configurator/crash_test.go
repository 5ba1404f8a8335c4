package configurator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// smallPayload is the max payload of the servers these tests hit the limit on.
const smallPayload = 64 << 10

// refused checks that err is a 400 whose description contains every one of
// wantHas, and that nothing was stored since before was taken.
func refused(t *testing.T, env *natstest.Env, err error, before snapshot, headBefore uint64, wantHas ...string) {
	t.Helper()
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid {
		t.Fatalf("apply error = %v, want a 400 *apiclient.Error", err)
	}
	for _, w := range wantHas {
		if !strings.Contains(ae.Description, w) {
			t.Errorf("description %q does not contain %q", ae.Description, w)
		}
	}
	after := takeSnapshot(t, env)
	if !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
		t.Errorf("buckets changed:\nbefore %v\nafter  %v", before, after)
	}
	if h := getHead(t, env); h.Revision != headBefore {
		t.Errorf("head moved to %v", h.Value)
	}
}

// Issue 9, item 13: an apply whose revision would not fit in a message used
// to store its journal and intents, fail on the revision and wedge every
// later apply. Now it is refused before anything is written.
func TestApply_RevisionOverTheMaxPayload_IsRefusedAndStoresNothing(t *testing.T) {
	env := startWithMaxPayload(t, smallPayload)
	start(t, env)
	first, second := tables("a", 1000, 200), tables("b", 2000, 200)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: first})
	if n := encodedSize(t, &sluicev1.Revision{Intents: append(first, second...)}); n <= smallPayload {
		t.Fatalf("calibration: both batches' revision is %d bytes, want more than %d", n, smallPayload)
	}
	before, headBefore := takeSnapshot(t, env), getHead(t, env).Revision

	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: second})

	refused(t, env, err, before, headBefore, "the revision", "400 intents", "bytes stored, over the limit of 61,440 bytes", "max_payload 65,536", "nothing was stored")
	// Nothing is wedged: a batch that fits lands at once.
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: second[:10]})
	if !resp.GetChanged() || resp.GetGeneration() != 2 || len(resp.GetCreated()) != 10 {
		t.Errorf("next apply = %v, want 10 created in generation 2", resp)
	}
}

func TestApply_IntentOverTheMaxPayload_IsRefusedNamingIt(t *testing.T) {
	env := startWithMaxPayload(t, smallPayload)
	start(t, env)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tables("a", 1000, 3)})
	// One intent just under the max payload: the request fits, the value
	// stored for it (with its source and time, and the CAS headers) does not.
	// Its bulk is long gateway addresses: labels are bounded far below it
	// (contract.MaxSelectorLabels), and many short items would make the
	// request, whose protojson spaces differ, larger than the value.
	l2 := &sluicev1.Layer2Network{Vlan: 100, Vni: 10100, Vrf: "tenant-a"}
	big := &sluicev1.Intent{Name: "big-00000", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: l2}}
	for i := 0; encodedSize(t, big) < smallPayload-1500; i++ {
		l2.AnycastGateways = append(l2.AnycastGateways, fmt.Sprintf("fd00:0000:0000:0000:0000:0000:%04x:%04x/128", i/65536, i%65536))
	}
	before, headBefore := takeSnapshot(t, env), getHead(t, env).Revision

	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{big}})

	refused(t, env, err, before, headBefore, "intent layer2network/big-00000", "bytes", "nothing was stored")
}

// Issue 9, item 14: 1,000 routing tables on one table id used to produce
// 999,000 field errors, a reply over the max payload and, at the client,
// only "context deadline exceeded".
func TestApply_1000TablesOnOneTableID_ClientGetsOneErrorCountingThem(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := tables("t", 100, 1000)
	for _, in := range ins {
		in.GetRoutingTable().TableId = 100
	}
	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid || len(ae.FieldErrors) != 1 {
		t.Fatalf("apply error = %.500v, want a 400 with one field error", err)
	}
	fe := ae.FieldErrors[0]
	if fe.GetIntent() != "routingtable/t-00000" || fe.GetField() != "spec.tableId" ||
		!strings.Contains(fe.GetRule(), "table id 100 is used by 1,000 routing tables") || !strings.Contains(fe.GetRule(), "(+997 more)") {
		t.Errorf("field error = %v", fe)
	}
}

func TestApply_ManyProblems_ReplyListsTheFirst100AndCountsAll(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := tables("t", 100, 250)
	for _, in := range ins {
		in.GetRoutingTable().TableId = 0 // required: one problem each
	}
	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid {
		t.Fatalf("apply error = %.300v, want a 400", err)
	}
	if len(ae.FieldErrors) != 100 || ae.FieldErrors[0].GetIntent() != "routingtable/t-00000" {
		t.Errorf("%d field errors listed, first %v; want the first 100", len(ae.FieldErrors), ae.FieldErrors[0])
	}
	if !strings.Contains(ae.Description, "250 problems") || !strings.Contains(ae.Description, "the first 100") {
		t.Errorf("description %q does not count all 250 and say 100 are listed", ae.Description)
	}
}

// Issue 9, item 13 as found: a journal left by the configurator before this
// fix, whose revision cannot be written, with its intents already stored. A
// restarted configurator used to exit at start; now it rolls the apply back.
func TestRun_LeftoverJournalThatCannotComplete_IsRolledBackAtStart(t *testing.T) {
	env := startWithMaxPayload(t, smallPayload)
	ctx := context.Background()
	r := start(t, env)
	first, second := tables("a", 1000, 200), tables("b", 2000, 200)
	firstResp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: first})
	r.stop(t)
	// What the old configurator left: the journal (an ApplyRequest, no
	// priors) and every intent of the batch, but no revision.
	legacy := store.New(env.Buckets.Revisions, func() *sluicev1.ApplyRequest { return &sluicev1.ApplyRequest{} })
	if _, err := legacy.Create(ctx, contract.KeyPending, &sluicev1.ApplyRequest{Intents: second, Source: "cli"}); err != nil {
		t.Fatal(err)
	}
	for _, in := range second {
		if _, err := intentsStore(env).Create(ctx, intent.Key(in), &sluicev1.StoredIntent{Intent: in, Source: "cli"}); err != nil {
			t.Fatal(err)
		}
	}
	evs := watchEvents(t, env.Conn)

	start(t, env) // fails the test if Run returns

	if _, err := journalStore(env).Get(ctx, contract.KeyPending); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("journal still there: %v", err)
	}
	for _, in := range second {
		if _, err := intentsStore(env).Get(ctx, intent.Key(in)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("intent %s of the rolled-back apply is still stored: %v", intent.Key(in), err)
		}
	}
	for _, in := range first {
		if got := getStored(t, env, intent.Key(in)); !proto.Equal(got.GetIntent(), in) {
			t.Fatalf("intent %s = %v", intent.Key(in), got)
		}
	}
	if h := getHead(t, env).Value; h.GetRevision() != firstResp.GetRevision() || h.GetGeneration() != 1 {
		t.Errorf("head = %v, want the first revision still", h)
	}
	natstest.Eventually(t, wait, "an ApplyRolledBack event", func() bool { return len(evs.ofType("ApplyRolledBack")) == 1 })
	if reason := evs.ofType("ApplyRolledBack")[0].GetReason(); !strings.Contains(reason, "200 intents") || !strings.Contains(reason, "bytes") {
		t.Errorf("rollback reason %q does not say what was rolled back and why", reason)
	}
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: second[:5]})
	if !resp.GetChanged() || resp.GetGeneration() != 2 {
		t.Errorf("next apply = %v, want a new revision at generation 2", resp)
	}
}

// An apply interrupted after writing some of its intents, whose journal
// names an intent that someone else has changed since, cannot complete: the
// intents it wrote are restored exactly as they were.
func TestRun_JournalNamingAChangedIntent_RestoresWhatTheApplyOverwrote(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	ins := examples(t)
	applied := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	r.stop(t)

	is := intentsStore(env)
	tenantA, err := is.Get(ctx, "layer2network.tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	storage, err := is.Get(ctx, "routingtable.storage")
	if err != nil {
		t.Fatal(err)
	}
	newA := proto.Clone(tenantA.Value.GetIntent()).(*sluicev1.Intent)
	newA.GetLayer2Network().Mtu = 1600
	newStorage := proto.Clone(storage.Value.GetIntent()).(*sluicev1.Intent)
	newStorage.GetRoutingTable().TableId = 4242
	added := tables("added", 7000, 1)[0]
	// The journal as apply writes it, then the crash after its first intent.
	j := &sluicev1.ApplyJournal{
		Intents: []*sluicev1.Intent{newA, added, newStorage}, Source: "cli", HasPrior: true,
		Prior: []*sluicev1.PriorIntent{
			{Key: "layer2network.tenant-a", Value: tenantA.Value, KvRevision: tenantA.Revision},
			{Key: intent.Key(added)},
			{Key: "routingtable.storage", Value: storage.Value, KvRevision: storage.Revision},
		},
	}
	if _, err := journalStore(env).Create(ctx, contract.KeyPending, j); err != nil {
		t.Fatal(err)
	}
	if _, err := is.Update(ctx, "layer2network.tenant-a", &sluicev1.StoredIntent{Intent: newA, Source: "cli"}, tenantA.Revision); err != nil {
		t.Fatal(err)
	}
	// Meanwhile someone rewrites routingtable.storage by hand (same spec).
	byHand := proto.Clone(storage.Value).(*sluicev1.StoredIntent)
	byHand.Source = "hand"
	if _, err := is.Update(ctx, "routingtable.storage", byHand, storage.Revision); err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, env.Conn)

	start(t, env)

	if got := getStored(t, env, "layer2network.tenant-a"); !proto.Equal(got, tenantA.Value) {
		t.Errorf("tenant-a = %v, want exactly what it was before the apply: %v", got, tenantA.Value)
	}
	if got := getStored(t, env, "routingtable.storage"); !proto.Equal(got, byHand) {
		t.Errorf("storage = %v, want the hand-written value left alone", got)
	}
	if _, err := is.Get(ctx, intent.Key(added)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s stored: %v", intent.Key(added), err)
	}
	if _, err := journalStore(env).Get(ctx, contract.KeyPending); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("journal still there: %v", err)
	}
	if h := getHead(t, env).Value; h.GetRevision() != applied.GetRevision() || h.GetGeneration() != 1 {
		t.Errorf("head = %v, want it unmoved", h)
	}
	natstest.Eventually(t, wait, "an ApplyRolledBack event", func() bool { return len(evs.ofType("ApplyRolledBack")) == 1 })
	reason := evs.ofType("ApplyRolledBack")[0].GetReason()
	for _, w := range []string{"intent routingtable/storage changed since the apply read it", "restored layer2network/tenant-a", "removed routingtable/added-00000"} {
		if !strings.Contains(reason, w) {
			t.Errorf("rollback reason %q does not contain %q", reason, w)
		}
	}
}

// A configurator stopped between an apply's intents and its head, then
// garbage over the head's revision and in a fresh intent key: once the
// journal's intents are written, the stored intents no longer hash to the
// head's revision, so the version in force of the unreadable key cannot be
// known and the head cannot move. Nothing cures that while the journal
// stays (the apply or delete that would is refused while it is pending, and
// so is the repair of the head's revision): the apply is rolled back, the
// head's revision rewritten from the intents as they were, and the next
// apply lands. Before, the journal stayed, and every apply and reconcile
// failed finishing it (chaos seed 665, 3 of 40 runs at one step of its fix).
func TestRun_LeftoverJournalWhoseHeadCannotMove_IsRolledBack(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	ins := examples(t)
	applied := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	r.stop(t)
	added := tables("added", 7000, 1)[0]
	j := &sluicev1.ApplyJournal{Intents: []*sluicev1.Intent{added}, Source: "cli", HasPrior: true,
		Prior: []*sluicev1.PriorIntent{{Key: intent.Key(added)}}}
	if _, err := journalStore(env).Create(ctx, contract.KeyPending, j); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Buckets.Intents.Put(ctx, "routingtable.chaos-704", []byte(`{"node":"node-01","labels":{"rack":"rack-1"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Buckets.Revisions.Put(ctx, applied.GetRevision(), []byte(`{"holder":"chaos","epoch":"5"}`)); err != nil {
		t.Fatal(err)
	}
	start(t, env)

	extra := tables("extra", 9000, 1)[0]
	resp, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{extra}})
	if err != nil {
		t.Fatalf("apply after the start: %v; want it to land, the interrupted apply rolled back", err)
	}
	if want := render.RevisionID(append(slices.Clone(ins), extra)); resp.GetRevision() != want {
		t.Errorf("revision %s, want %s: the examples and %s, without the rolled-back %s", render.Short(resp.GetRevision()), render.Short(want),
			intent.ID(extra), intent.ID(added))
	}
	if _, err := intentsStore(env).Get(ctx, intent.Key(added)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s stored (%v); want it removed by the rollback", intent.Key(added), err)
	}
	if rev := getRevision(t, env, applied.GetRevision()); len(rev.GetIntents()) != len(ins) {
		t.Errorf("revision %s rewritten with %d intents, want %d", render.Short(applied.GetRevision()), len(rev.GetIntents()), len(ins))
	}
}

// The head's own revision holding garbage (and nothing else unreadable):
// the configurator, reading its state at start, writes the revision again
// from the stored intents (its id is their hash), then the head as it was
// (the coordinator reads a head's revision when the head moves). Without
// it a rollout of
// that head is never started by a coordinator that had not read it before
// the garbage (chaos seed 23: a new term never started the queued rollout,
// which never ended: I2).
func TestRun_HeadRevisionUnreadable_IsWrittenAgainAtStart(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	applied := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	r.stop(t)
	if _, err := env.Buckets.Revisions.Put(ctx, applied.GetRevision(), []byte(`{"node":"chaos","phase":"NODE_PHASE_PROVISIONED"}`)); err != nil {
		t.Fatal(err)
	}

	head, err := env.Buckets.Revisions.Get(ctx, contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}

	start(t, env)

	revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	natstest.Eventually(t, wait, "the head's revision readable again", func() bool {
		e, err := revs.Get(ctx, applied.GetRevision())
		return err == nil && e.Value.GetId() == applied.GetRevision() && len(e.Value.GetIntents()) > 0
	})
	// The head is written again, as it was, so that a coordinator that
	// could not read its revision reads it again.
	natstest.Eventually(t, wait, "the head written again", func() bool {
		e, err := env.Buckets.Revisions.Get(ctx, contract.KeyHead)
		return err == nil && e.Revision() > head.Revision() && string(e.Value()) == string(head.Value())
	})
}

// TestRun_HeadRevisionGarbledWhileRunning_IsWrittenAgain: garbage over the
// head's revision while the configurator runs (no restart, reconnect or
// resume to reconcile) is repaired at once, and the head written again: a
// coordinator term that loaded meanwhile could not render the config in
// force, and a node coming back stayed unconfigured (chaos seed 143, I2).
func TestRun_HeadRevisionGarbledWhileRunning_IsWrittenAgain(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	start(t, env)
	applied := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t)})
	head, err := env.Buckets.Revisions.Get(ctx, contract.KeyHead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Buckets.Revisions.Put(ctx, applied.GetRevision(), []byte(`{"id":"cut in ha`)); err != nil {
		t.Fatal(err)
	}
	revs := store.New(env.Buckets.Revisions, func() *sluicev1.Revision { return &sluicev1.Revision{} })
	natstest.Eventually(t, wait, "the head's revision readable again", func() bool {
		e, err := revs.Get(ctx, applied.GetRevision())
		return err == nil && e.Value.GetId() == applied.GetRevision() && len(e.Value.GetIntents()) > 0
	})
	natstest.Eventually(t, wait, "the head written again", func() bool {
		e, err := env.Buckets.Revisions.Get(ctx, contract.KeyHead)
		return err == nil && e.Revision() > head.Revision() && string(e.Value()) == string(head.Value())
	})
}

// Issue 9, item 12 for the configurator: values that do not decode are
// skipped and reported, never fatal.
func TestRun_UndecodableValues_AreSkippedWithAnEventAndAppliesWork(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	ins := examples(t)
	applied := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	r.stop(t)
	garbage := []byte("{not protojson")
	for _, w := range []struct {
		put func(context.Context, string, []byte) (uint64, error)
		key string
	}{
		{env.Buckets.Intents.Put, "routingtable.garbage"},
		{env.Buckets.Revisions.Put, contract.KeyPending},
		{env.Buckets.Revisions.Put, applied.GetRevision()}, // the head's own revision
	} {
		if _, err := w.put(ctx, w.key, garbage); err != nil {
			t.Fatal(err)
		}
	}
	evs := watchEvents(t, env.Conn)

	start(t, env)

	// The head's own revision is unreadable too, but the readable intents
	// hash to its id: it held them and nothing else, so routingtable/garbage
	// (a key no intent was stored under) has no version in force, and the
	// apply lands without it (chaos seed 665). Before, it was refused until
	// the unreadable key was deleted. Garbage over a stored intent still
	// refuses it (TestRun_UnreadableIntentAndHeadRevision_FreshKeyHasNoVersionInForce;
	// chaos seeds 20, 36, 113: a revision cut without it removed it from
	// every node).
	extra := tables("extra", 9000, 1)[0]
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{extra}})
	if want := render.RevisionID(append(ins, extra)); !resp.GetChanged() || resp.GetRevision() != want {
		t.Errorf("apply = %v, want a revision of the examples and %s without the unreadable key", resp, intent.ID(extra))
	}
	if _, err := del(t, env.Conn, "routingtable", "garbage"); err != nil {
		t.Fatalf("delete the unreadable intent: %v", err)
	}
	natstest.Eventually(t, wait, "events naming each unreadable key", func() bool {
		var reasons []string
		for _, ev := range evs.all() {
			reasons = append(reasons, ev.GetReason())
		}
		all := strings.Join(reasons, "\n")
		return strings.Contains(all, contract.BucketIntents+"/routingtable.garbage") &&
			strings.Contains(all, contract.BucketRevisions+"/"+contract.KeyPending) &&
			strings.Contains(all, contract.BucketRevisions+"/"+applied.GetRevision())
	})
	n := 0
	for _, ev := range evs.ofType("ValueUnreadable") {
		if ev.GetBucket() == contract.BucketIntents && ev.GetKey() == "routingtable.garbage" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d ValueUnreadable events for %s/routingtable.garbage, want 1 (once per value, not once per read)", n, contract.BucketIntents)
	}

	t.Run("an unreadable head is replaced with a later generation", func(t *testing.T) {
		if _, err := env.Buckets.Revisions.Put(ctx, contract.KeyHead, garbage); err != nil {
			t.Fatal(err)
		}
		resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: tables("more", 9100, 1)})
		if !resp.GetChanged() || resp.GetGeneration() <= 2 {
			t.Errorf("apply = %v, want a new head with a generation above 2", resp)
		}
		if h := getHead(t, env).Value; h.GetRevision() != resp.GetRevision() {
			t.Errorf("head = %v", h)
		}
	})

	t.Run("an unreadable revision is rewritten when its content comes back", func(t *testing.T) {
		for _, name := range []string{"extra-00000", "more-00000"} {
			if _, err := del(t, env.Conn, "routingtable", name); err != nil {
				t.Fatal(err)
			}
		}
		if h := getHead(t, env).Value; h.GetRevision() != applied.GetRevision() {
			t.Fatalf("head = %v, want the examples' revision %s again", h, applied.GetRevision())
		}
		if rev := getRevision(t, env, applied.GetRevision()); len(rev.GetIntents()) != len(ins) {
			t.Errorf("revision %s holds %d intents, want %d", applied.GetRevision(), len(rev.GetIntents()), len(ins))
		}
		natstest.Eventually(t, wait, "a ValueRewritten event for the revision", func() bool {
			n := 0
			for _, ev := range evs.ofType("ValueRewritten") {
				if ev.GetBucket() == contract.BucketRevisions && ev.GetKey() == applied.GetRevision() {
					n++
				}
			}
			return n == 1
		})
	})
}

// A delete goes through the apply journal: one interrupted after writing it
// (what a configurator killed there leaves) is finished by the next start —
// the intent marked, with the delete's reason, and the head moved without it.
func TestRun_DeleteInterruptedAfterItsJournal_IsFinishedAtStart(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	r := start(t, env)
	ins := tables("t", 100, 2)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	r.stop(t)
	key := intent.Key(ins[0])
	cur, err := intentsStore(env).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := journalStore(env).Create(ctx, contract.KeyPending, &sluicev1.ApplyJournal{Source: contract.SourceAPI, HasPrior: true,
		Mark: []string{key}, Prior: []*sluicev1.PriorIntent{{Key: key, Value: cur.Value, KvRevision: cur.Revision}}}); err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, env.Conn)

	start(t, env)

	if !getStored(t, env, key).GetMarkedForDeletion() {
		t.Fatalf("%s not marked for deletion", key)
	}
	if got := getRevision(t, env, headNow(t, env).GetRevision()).GetIntents(); len(got) != 1 || intent.Key(got[0]) != intent.Key(ins[1]) {
		t.Fatalf("head's revision holds %v, want only %s", got, intent.ID(ins[1]))
	}
	if _, err := journalStore(env).Get(ctx, contract.KeyPending); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("journal still there: %v", err)
	}
	natstest.Eventually(t, wait, "an IntentMarkedForDeletion event", func() bool { return len(evs.ofType("IntentMarkedForDeletion")) == 1 })
	if reason := evs.ofType("IntentMarkedForDeletion")[0].GetReason(); !strings.HasPrefix(reason, intent.ID(ins[0])+" deleted;") {
		t.Errorf("reason %q, want it to say %s was deleted", reason, intent.ID(ins[0]))
	}
}
