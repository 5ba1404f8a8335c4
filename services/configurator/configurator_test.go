package configurator_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/micro"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/testkit/natstest"
	"github.com/sluicehq/sluice/pkg/apiclient"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/configurator"
)

func TestApply_ValidBatchCreatesRevisionAndHead(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	evs := watchEvents(t, env.Conn)
	start(t, env)
	ins := examples(t)

	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "25%"}})

	wantID := render.RevisionID(ins)
	if !resp.GetChanged() || resp.GetRevision() != wantID || resp.GetGeneration() != 1 {
		t.Fatalf("response = %v, want changed, revision %s, generation 1", resp, wantID)
	}
	if len(resp.GetCreated()) != 7 || len(resp.GetUpdated())+len(resp.GetUnchanged()) != 0 {
		t.Errorf("created %v updated %v unchanged %v, want 7 created", resp.GetCreated(), resp.GetUpdated(), resp.GetUnchanged())
	}
	for _, in := range ins {
		got := getStored(t, env, intent.Key(in))
		if !proto.Equal(got.GetIntent(), in) || got.GetSource() != "api" || got.GetMarkedForDeletion() || got.GetUpdatedAt() == nil {
			t.Errorf("stored %s = %v", intent.Key(in), got)
		}
	}
	rev := getRevision(t, env, wantID)
	if rev.GetId() != wantID || rev.GetCreatedAt() == nil || len(rev.GetIntents()) != 7 {
		t.Fatalf("revision = %v", rev)
	}
	if !slices.IsSortedFunc(rev.GetIntents(), render.Compare) {
		t.Error("revision intents are not in canonical order")
	}
	head := getHead(t, env).Value
	if head.GetRevision() != wantID || head.GetGeneration() != 1 || head.GetStrategy().GetMaxParallel() != "25%" {
		t.Errorf("head = %v", head)
	}
	if !strings.HasPrefix(head.GetReason(), "applied 7 intents: created layer2network/storage, layer2network/tenant-a") {
		t.Errorf("head reason = %q", head.GetReason())
	}

	got := evs.waitFor(t, 9)
	want := []string{}
	for _, in := range render.Sorted(ins) {
		want = append(want, "IntentCreated intent "+intent.Key(in))
	}
	want = append(want, "RevisionCreated revision "+wantID, "HeadMoved revision "+wantID)
	if !slices.Equal(got, want) {
		t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, ev := range evs.all() {
		if ev.GetReason() == "" || ev.GetComponent() != configurator.Component {
			t.Errorf("event %s has reason %q component %q", ev.GetType(), ev.GetReason(), ev.GetComponent())
		}
	}
}

func TestApply_SameContentAgain_ChangesNothing(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := examples(t)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	headBefore := getHead(t, env)
	before := takeSnapshot(t, env)
	evs := watchEvents(t, env.Conn)

	// Same content in another order, from another source, with another strategy.
	slices.Reverse(ins)
	again := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Source: "git", Strategy: &sluicev1.Strategy{MaxParallel: "3"}})

	if again.GetChanged() || again.GetRevision() != first.GetRevision() || again.GetGeneration() != 1 {
		t.Fatalf("second apply = %v, want unchanged at generation 1", again)
	}
	if len(again.GetUnchanged()) != 7 || len(again.GetCreated())+len(again.GetUpdated()) != 0 {
		t.Errorf("second apply created %v updated %v", again.GetCreated(), again.GetUpdated())
	}
	if h := getHead(t, env); h.Revision != headBefore.Revision {
		t.Errorf("head was rewritten: %v", h.Value)
	}
	if after := takeSnapshot(t, env); !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
		t.Errorf("buckets changed:\nbefore %v\nafter  %v", before, after)
	}
	// A real change next: its events must be the first to arrive, proving the
	// no-op emitted none.
	changed := proto.Clone(find(t, ins, "routingtable/mgmt")).(*sluicev1.Intent)
	changed.GetRoutingTable().TableId = 11
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{changed}})
	got := evs.waitFor(t, 3)
	want := []string{"IntentUpdated intent routingtable.mgmt", "RevisionCreated revision " + resp.GetRevision(), "HeadMoved revision " + resp.GetRevision()}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if resp.GetGeneration() != 2 || !slices.Equal(resp.GetUpdated(), []string{"routingtable/mgmt"}) {
		t.Errorf("change = %v", resp)
	}
	if r := getHead(t, env).Value.GetReason(); r != "applied 1 intent: updated routingtable/mgmt" {
		t.Errorf("head reason = %q", r)
	}
}

func TestApply_InvalidBatch_StoresNothingAndReturnsEveryFieldError(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := examples(t)
	mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	broken, err := intent.ParseFiles("../../examples/broken")
	if err != nil {
		t.Fatal(err)
	}
	sameVLAN := proto.Clone(find(t, ins, "layer2network/tenant-a")).(*sluicev1.Intent)
	sameVLAN.Name = "tenant-a2"
	sameVLAN.GetLayer2Network().Vni = 20100
	type fe struct{ intent, field, ruleHas string }
	tests := []struct {
		name     string
		given    *sluicev1.ApplyRequest
		wantDesc string
		want     []fe
	}{
		{"examples/broken", &sluicev1.ApplyRequest{Intents: broken}, "3 problems with the batch; nothing was stored", []fe{
			{"layer2network/tenant-c", "spec.anycastGateways[0]", "not an address in CIDR form"},
			{"layer2network/tenant-c", "spec.vlan", "5000 is outside 1-4094"},
			{"routingtable/main-copy", "spec.tableId", "254 is reserved"},
		}},
		{"a valid intent beside an invalid one is not stored either", &sluicev1.ApplyRequest{Intents: append(slices.Clone(broken),
			&sluicev1.Intent{Name: "fine", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 77}}})},
			"3 problems with the batch", []fe{
				{"layer2network/tenant-c", "spec.anycastGateways[0]", "CIDR"},
				{"layer2network/tenant-c", "spec.vlan", "5000"},
				{"routingtable/main-copy", "spec.tableId", "254"},
			}},
		{"conflict with a stored intent", &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{sameVLAN}},
			"1 problem with the batch together with the stored intents", []fe{
				{"layer2network/tenant-a2", "spec.vlan", "VLAN 100 is used by 2 layer2 networks whose node selectors can match the same node: layer2network/tenant-a, layer2network/tenant-a2"},
			}},
		{"same intent twice in a batch", &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{ins[0], ins[0]}},
			"1 problem with the batch", []fe{{intent.ID(ins[0]), "name", "given 2 times"}}},
		{"bad strategy", &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "0%"}},
			"1 problem with the batch", []fe{{"", "strategy.maxParallel", `"0%" is not a percentage`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, headBefore := takeSnapshot(t, env), getHead(t, env)
			_, err := apply(t, env.Conn, tt.given)
			var ae *apiclient.Error
			if !errors.As(err, &ae) {
				t.Fatalf("apply error = %v, want an *apiclient.Error", err)
			}
			if ae.Code != contract.ErrCodeInvalid || !strings.Contains(ae.Description, tt.wantDesc) {
				t.Errorf("code %s description %q, want %s containing %q", ae.Code, ae.Description, contract.ErrCodeInvalid, tt.wantDesc)
			}
			if len(ae.FieldErrors) != len(tt.want) {
				t.Fatalf("field errors:\n%v\nwant %d", err, len(tt.want))
			}
			for i, w := range tt.want {
				g := ae.FieldErrors[i]
				if g.GetIntent() != w.intent || g.GetField() != w.field || !strings.Contains(g.GetRule(), w.ruleHas) {
					t.Errorf("field error %d = %v, want %v", i, g, w)
				}
			}
			after := takeSnapshot(t, env)
			if !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
				t.Errorf("buckets changed:\nbefore %v\nafter  %v", before, after)
			}
			if h := getHead(t, env); h.Revision != headBefore.Revision {
				t.Errorf("head moved to %v", h.Value)
			}
		})
	}
}

func TestAPI_MalformedRequestsAreRejectedWithTheProblem(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	tests := []struct {
		name, subject, body, wantDesc string
	}{
		{"not JSON", contract.SubjectApply, "{nope", "malformed ApplyRequest"},
		{"unknown field", contract.SubjectApply, `{"intent": []}`, `unknown field "intent"`},
		{"empty body", contract.SubjectApply, "", "empty request: send a ApplyRequest as protojson"},
		{"no intents", contract.SubjectApply, `{"intents": []}`, "the request holds no intents"},
		{"delete not JSON", contract.SubjectDelete, "[", "malformed DeleteRequest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := env.Conn.Request(tt.subject, []byte(tt.body), wait)
			if err != nil {
				t.Fatal(err)
			}
			if code := msg.Header.Get(micro.ErrorCodeHeader); contract.ErrCode(code) != contract.ErrCodeInvalid {
				t.Errorf("code = %q, want %s", code, contract.ErrCodeInvalid)
			}
			if desc := msg.Header.Get(micro.ErrorHeader); !strings.Contains(desc, tt.wantDesc) {
				t.Errorf("description = %q, want it to contain %q", desc, tt.wantDesc)
			}
		})
	}
}

func TestDelete_MarksTheIntentAndMovesTheHead(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := examples(t)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	evs := watchEvents(t, env.Conn)

	resp, err := del(t, env.Conn, "layer2network", "storage")
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	var rest []*sluicev1.Intent
	for _, in := range ins {
		if intent.ID(in) != "layer2network/storage" {
			rest = append(rest, in)
		}
	}
	wantID := render.RevisionID(rest)
	if !resp.GetChanged() || resp.GetRevision() != wantID || resp.GetGeneration() != 2 {
		t.Fatalf("delete = %v, want changed to %s at generation 2", resp, wantID)
	}
	if s := getStored(t, env, "layer2network.storage"); !s.GetMarkedForDeletion() || s.GetIntent() == nil {
		t.Errorf("stored = %v, want marked for deletion and kept", s)
	}
	if n := len(getRevision(t, env, wantID).GetIntents()); n != 6 {
		t.Errorf("new revision has %d intents, want 6", n)
	}
	if h := getHead(t, env).Value; h.GetReason() != "deleted layer2network/storage" {
		t.Errorf("head reason = %q", h.GetReason())
	}
	got := evs.waitFor(t, 3)
	want := []string{"IntentMarkedForDeletion intent layer2network.storage", "RevisionCreated revision " + wantID, "HeadMoved revision " + wantID}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}

	t.Run("again changes nothing", func(t *testing.T) {
		again, err := del(t, env.Conn, "Layer2Network", "storage")
		if err != nil || again.GetChanged() || again.GetGeneration() != 2 || again.GetRevision() != wantID {
			t.Fatalf("second delete = %v, %v; want unchanged at generation 2", again, err)
		}
	})
	t.Run("re-applying it un-marks it and returns to the old content as a new generation", func(t *testing.T) {
		back := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: []*sluicev1.Intent{find(t, ins, "layer2network/storage")}})
		if !back.GetChanged() || back.GetRevision() != first.GetRevision() || back.GetGeneration() != 3 ||
			!slices.Equal(back.GetCreated(), []string{"layer2network/storage"}) {
			t.Fatalf("re-apply = %v", back)
		}
		if getStored(t, env, "layer2network.storage").GetMarkedForDeletion() {
			t.Error("still marked for deletion")
		}
	})
	t.Run("missing intent is 404", func(t *testing.T) {
		_, err := del(t, env.Conn, "RoutingTable", "nope")
		var ae *apiclient.Error
		if !errors.As(err, &ae) || ae.Code != contract.ErrCodeNotFound || !strings.Contains(ae.Description, "routingtable/nope does not exist") {
			t.Fatalf("error = %v, want 404 naming routingtable/nope", err)
		}
	})
	t.Run("unknown kind is 400 naming the valid kinds", func(t *testing.T) {
		_, err := del(t, env.Conn, "Bridge", "x")
		var ae *apiclient.Error
		if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid ||
			!strings.Contains(ae.Description, "Layer2Network, RoutingTable, VRFRoute") {
			t.Fatalf("error = %v, want 400 naming the kinds", err)
		}
	})
}

func TestRun_CompletesAnApplyLeftHalfDone(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	ins := examples(t)
	// A configurator crashed after journaling a batch and writing one intent of it.
	journal := store.New(env.Buckets.Revisions, func() *sluicev1.ApplyRequest { return &sluicev1.ApplyRequest{} })
	if _, err := journal.Create(ctx, contract.KeyPending, &sluicev1.ApplyRequest{
		Intents: ins, Source: "api", Strategy: &sluicev1.Strategy{MaxParallel: "2"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := intentsStore(env).Create(ctx, intent.Key(ins[0]), &sluicev1.StoredIntent{Intent: ins[0], Source: "api"}); err != nil {
		t.Fatal(err)
	}

	start(t, env)

	for _, in := range ins {
		if got := getStored(t, env, intent.Key(in)); !proto.Equal(got.GetIntent(), in) {
			t.Errorf("intent %s = %v", intent.Key(in), got)
		}
	}
	head := getHead(t, env).Value
	if head.GetRevision() != render.RevisionID(ins) || head.GetGeneration() != 1 || head.GetStrategy().GetMaxParallel() != "2" {
		t.Errorf("head = %v, want the batch's revision at generation 1 with its strategy", head)
	}
	if !strings.Contains(head.GetReason(), "applied 7 intents: created") || !strings.Contains(head.GetReason(), "completed after an interruption") {
		t.Errorf("head reason = %q", head.GetReason())
	}
	if _, err := journal.Get(ctx, contract.KeyPending); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("journal still there: %v", err)
	}
}

func TestApply_CompletesALeftoverJournalFirst(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := examples(t)
	// A journal appears as if a previous instance died after writing it.
	journal := store.New(env.Buckets.Revisions, func() *sluicev1.ApplyRequest { return &sluicev1.ApplyRequest{} })
	if _, err := journal.Create(context.Background(), contract.KeyPending, &sluicev1.ApplyRequest{Intents: ins[:3], Source: "api"}); err != nil {
		t.Fatal(err)
	}
	resp := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins[3:]})
	if resp.GetRevision() != render.RevisionID(ins) || resp.GetGeneration() != 2 {
		t.Fatalf("apply = %v, want both batches in generation 2", resp)
	}
}

func TestRun_ReconcilesTheHeadWithTheStoredIntents(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ctx := context.Background()
	ins := examples(t)
	r := start(t, env)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "1"}})
	r.stop(t)

	t.Run("restart with nothing changed keeps the head", func(t *testing.T) {
		before := getHead(t, env)
		r := start(t, env)
		r.stop(t)
		if h := getHead(t, env); h.Revision != before.Revision {
			t.Errorf("head rewritten: %v", h.Value)
		}
	})

	// The configurator died after marking an intent, before moving the head.
	is := intentsStore(env)
	e, err := is.Get(ctx, "routingtable.storage")
	if err != nil {
		t.Fatal(err)
	}
	e.Value.MarkedForDeletion = true
	if _, err := is.Update(ctx, "routingtable.storage", e.Value, e.Revision); err != nil {
		t.Fatal(err)
	}
	evs := watchEvents(t, env.Conn)
	start(t, env)

	var rest []*sluicev1.Intent
	for _, in := range ins {
		if intent.ID(in) != "routingtable/storage" {
			rest = append(rest, in)
		}
	}
	head := getHead(t, env).Value
	if head.GetRevision() != render.RevisionID(rest) || head.GetGeneration() != 2 || head.GetStrategy().GetMaxParallel() != "1" {
		t.Fatalf("head = %v, want the set without routingtable/storage at generation 2, strategy kept", head)
	}
	if !strings.HasPrefix(head.GetReason(), "reconciled: the stored intents differ from head revision "+render.Short(first.GetRevision())) ||
		!strings.Contains(head.GetReason(), "removed routingtable/storage") {
		t.Errorf("head reason = %q", head.GetReason())
	}
	got := evs.waitFor(t, 2)
	if !slices.Equal(got, []string{"RevisionCreated revision " + head.GetRevision(), "HeadMoved revision " + head.GetRevision()}) {
		t.Errorf("events = %v", got)
	}
}

func TestRun_InvalidStoredIntentsKeepTheHeadAndAreReported(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	ins := examples(t)
	r := start(t, env)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins})
	r.stop(t)

	// Someone writes an intent by hand that conflicts with tenant-a.
	bad := proto.Clone(find(t, ins, "layer2network/tenant-a")).(*sluicev1.Intent)
	bad.Name = "by-hand"
	if _, err := intentsStore(env).Create(context.Background(), intent.Key(bad), &sluicev1.StoredIntent{Intent: bad, Source: "hand"}); err != nil {
		t.Fatal(err)
	}
	start(t, env) // reconciles at start, and must not fail because of them
	if h := getHead(t, env).Value; h.GetRevision() != first.GetRevision() {
		t.Fatalf("head moved to %v despite the invalid intents", h)
	}
	// Applying anything shows the problem, so the operator can fix it.
	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins[:1]})
	var ae *apiclient.Error
	if !errors.As(err, &ae) || ae.Code != contract.ErrCodeInvalid || len(ae.FieldErrors) != 2 {
		t.Fatalf("apply error = %v, want 400 with the VLAN and the VNI conflict", err)
	}
	// Deleting the bad intent fixes it.
	if resp, err := del(t, env.Conn, "layer2network", "by-hand"); err != nil || resp.GetChanged() {
		t.Fatalf("delete by-hand = %v, %v; want ok and unchanged head content", resp, err)
	}
}

// An apply sent again under the same request id (its sender timed out while
// the first landed) is answered with what the first did, even where applying
// the same content again would mean something: after its rollout rolled back,
// a new request re-rolls the head; the retried one must not.
func TestApply_SameRequestAgain_IsAnsweredNotAppliedTwice(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	req := &sluicev1.ApplyRequest{Intents: examples(t), RequestId: "req-1"}
	first := mustApply(t, env.Conn, req)
	if first.GetReplayed() || first.GetGeneration() != 1 {
		t.Fatalf("first apply = %v", first)
	}
	if got := getHead(t, env).Value.GetRequestId(); got != "req-1" {
		t.Errorf("head records request %q, want req-1", got)
	}
	// The coordinator rolled generation 1 back.
	rolledBack, err := store.Marshal(&sluicev1.Rollout{Id: contract.RolloutID(1, first.GetRevision()), Phase: sluicev1.RolloutPhase_ROLLOUT_PHASE_ROLLED_BACK})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Buckets.Rollouts.Put(context.Background(), contract.RolloutID(1, first.GetRevision()), rolledBack); err != nil {
		t.Fatal(err)
	}
	headBefore := getHead(t, env)

	again := mustApply(t, env.Conn, req)
	if !again.GetReplayed() || again.GetGeneration() != 1 || again.GetRevision() != first.GetRevision() {
		t.Errorf("retried apply = %v, want the first answer replayed (generation 1)", again)
	}
	if h := getHead(t, env); h.Revision != headBefore.Revision {
		t.Errorf("the retried apply moved the head: %v", h.Value)
	}

	// Another request with the same content is the operator asking again: a re-roll.
	reroll := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: examples(t), RequestId: "req-2"})
	if reroll.GetReplayed() || reroll.GetGeneration() != 2 {
		t.Errorf("new request = %v, want a re-roll at generation 2", reroll)
	}
}

// A running rollout's strategy is never changed under it: applying the
// head's own intents with another strategy while its rollout runs is
// refused, saying what to do; without strategy flags, or once it ended, it
// changes nothing.
func TestApply_SameContentWithAnotherStrategyWhileItsRolloutRuns_IsRefused(t *testing.T) {
	env := natstest.Start(t, contract.DefaultSettings())
	start(t, env)
	ins := examples(t)
	first := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "1"}})
	id := contract.RolloutID(first.GetGeneration(), first.GetRevision())
	records := store.New(env.Buckets.Rollouts, func() *sluicev1.Rollout { return &sluicev1.Rollout{} })
	setPhase := func(p sluicev1.RolloutPhase) {
		t.Helper()
		if _, err := records.Mutate(context.Background(), id, func(*sluicev1.Rollout) (*sluicev1.Rollout, error) {
			return &sluicev1.Rollout{Id: id, Revision: first.GetRevision(), Generation: first.GetGeneration(), Phase: p}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	setPhase(sluicev1.RolloutPhase_ROLLOUT_PHASE_PROGRESSING)
	before := takeSnapshot(t, env)

	_, err := apply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "5"}})
	var apiErr *apiclient.Error
	if !errors.As(err, &apiErr) || apiErr.Code != contract.ErrCodeConflict ||
		!strings.Contains(apiErr.Description, "rollout "+id+" of these intents is running with strategy {\"maxParallel\":\"1\"}") ||
		!strings.Contains(apiErr.Description, "sluice rollout abort") {
		t.Fatalf("apply with another strategy while running: %v; want 409 naming the rollout, its strategy and what to do", err)
	}
	if after := takeSnapshot(t, env); !maps.Equal(before.intents, after.intents) || !maps.Equal(before.revisions, after.revisions) {
		t.Errorf("buckets changed by a refused request")
	}
	if r := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins}); r.GetChanged() {
		t.Errorf("apply without strategy flags while running = %v; want unchanged", r)
	}
	setPhase(sluicev1.RolloutPhase_ROLLOUT_PHASE_SUCCEEDED)
	if r := mustApply(t, env.Conn, &sluicev1.ApplyRequest{Intents: ins, Strategy: &sluicev1.Strategy{MaxParallel: "5"}}); r.GetChanged() {
		t.Errorf("apply with another strategy after it succeeded = %v; want unchanged", r)
	}
}
