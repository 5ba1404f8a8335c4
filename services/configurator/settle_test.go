package configurator

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// settleStep is one answer of a registry (or one failed fetch) at t0+at,
// and what the sync must decide. Names are layer2 networks.
type settleStep struct {
	at      time.Duration
	answer  []string // the names the answer declares
	down    bool     // the fetch failed: no answer
	confirm bool     // an operator confirmed what the status shows (held or pending)

	held      bool
	pending   []string // after the step
	marked    []string
	entered   []string
	restarted []string
	cancelled []string
}

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// vlanOf gives each name its own VLAN, so no two networks clash.
func vlanOf(name string) uint32 {
	v := uint32(100)
	for _, c := range name {
		v = v*31 + uint32(c)
	}
	return 100 + v%3000
}

func l2IDs(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "layer2network/" + n
	}
	return out
}

// runSettle plays steps against a registry that owns owns, carrying the
// stored intents and the pending state from one step to the next as the
// syncer does (afterAnswer, afterFailure).
func runSettle(t *testing.T, owns []string, after time.Duration, steps []settleStep) {
	t.Helper()
	var entries []*sluicev1.StoredIntent
	for _, n := range owns {
		entries = append(entries, owned("gitops", n+".yaml", l2(n, vlanOf(n))))
	}
	live := stored(entries...)
	pend := pendingState{}
	var lastHeld string
	for i, s := range steps {
		what := fmt.Sprintf("step %d (t0+%s, answer %v)", i+1, s.at, s.answer)
		if s.down {
			pend = pend.afterFailure()
			if len(pend.since) > 0 {
				t.Fatalf("%s: pending %v after a failed fetch, want none", what, pend.since)
			}
			continue
		}
		var confirm *sluicev1.RegistryConfirm
		if s.confirm {
			digest := lastHeld
			if digest == "" {
				digest = pendingDigest("gitops", pend.since)
			}
			confirm = &sluicev1.RegistryConfirm{Digest: digest, By: "test"}
		}
		var ds []registry.Document
		for _, n := range s.answer {
			ds = append(ds, doc(n+".yaml", l2(n, vlanOf(n))))
		}
		snap := docs(ds...)
		plan := planSync(gitops, snap, live, nil, confirm, settling{pendingState: pend, now: t0.Add(s.at), after: after})

		if got := plan.held != nil; got != s.held {
			t.Errorf("%s: held %v, want %v", what, plan.held, s.held)
		}
		var pending []string
		for _, key := range sortedKeys(plan.pending) {
			pending = append(pending, idOfKey(key))
		}
		for _, c := range []struct {
			name      string
			got, want []string
		}{
			{"pending", pending, l2IDs(s.pending)},
			{"marked", plan.marked, l2IDs(s.marked)},
			{"entered", plan.entered, l2IDs(s.entered)},
			{"restarted", plan.restarted, l2IDs(s.restarted)},
			{"cancelled", plan.cancelled, l2IDs(s.cancelled)},
		} {
			if !slices.Equal(c.got, c.want) {
				t.Errorf("%s: %s %v, want %v", what, c.name, c.got, c.want)
			}
		}
		if got, want := plan.journal.GetMark(), len(s.marked); len(got) != want {
			t.Errorf("%s: the journal marks %v, want %d", what, got, want)
		}
		if s.confirm && len(s.marked) > 0 && plan.confirmed == "" {
			t.Errorf("%s: marked on a confirmation, but the plan names none", what)
		}

		// What the sync wrote, as the journal would.
		for _, key := range plan.journal.GetMark() {
			v := proto.Clone(live[key].Value).(*sluicev1.StoredIntent)
			v.MarkedForDeletion = true
			live[key] = store.Entry[*sluicev1.StoredIntent]{Key: key, Value: v, Revision: live[key].Revision + 1}
		}
		for _, in := range plan.journal.GetIntents() {
			key := intent.Key(in)
			live[key] = store.Entry[*sluicev1.StoredIntent]{Key: key, Value: owned("gitops", key+".yaml", in), Revision: live[key].Revision + 1}
		}
		pend = afterAnswer(plan, snap)
		lastHeld = plan.held.GetDigest()
	}
}

// The reproduction of issue 19: a Redis owning tenant-y, tenant-z and
// tenant-v restarted empty and its keys came back one a second. Before the
// settle period, the answer at 2 of 3 marked tenant-v.
func TestSettle_TrickleBack_NothingMarked(t *testing.T) {
	runSettle(t, []string{"tenant-v", "tenant-y", "tenant-z"}, 30*time.Second, []settleStep{
		{at: 0, answer: nil, held: true},
		{at: time.Second, answer: []string{"tenant-y"}, held: true},
		{at: 2 * time.Second, answer: []string{"tenant-y", "tenant-z"}, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
		{at: 3 * time.Second, answer: []string{"tenant-y", "tenant-z", "tenant-v"}, cancelled: []string{"tenant-v"}},
		{at: time.Hour, answer: []string{"tenant-y", "tenant-z", "tenant-v"}},
	})
}

func TestSettle_Rules(t *testing.T) {
	yzv := []string{"tenant-v", "tenant-y", "tenant-z"}
	yz := []string{"tenant-y", "tenant-z"}
	for _, tc := range []struct {
		name  string
		owns  []string
		after time.Duration
		steps []settleStep
	}{
		{
			name: "missing from every answer over the whole period: marked", owns: yzv, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: 10 * time.Second, answer: yz, pending: []string{"tenant-v"}},
				{at: 29 * time.Second, answer: yz, pending: []string{"tenant-v"}},
				{at: 30 * time.Second, answer: yz, marked: []string{"tenant-v"}},
				{at: 31 * time.Second, answer: yz},
			},
		},
		{
			name: "an unreachable answer in between restarts the period", owns: yzv, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: 10 * time.Second, down: true},
				{at: 30 * time.Second, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: 59 * time.Second, answer: yz, pending: []string{"tenant-v"}},
				{at: 60 * time.Second, answer: yz, marked: []string{"tenant-v"}},
			},
		},
		{
			name: "a held answer in between resets, the released hold starts again", owns: yzv, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: 10 * time.Second, answer: nil, held: true},
				{at: 20 * time.Second, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: 49 * time.Second, answer: yz, pending: []string{"tenant-v"}},
				{at: 50 * time.Second, answer: yz, marked: []string{"tenant-v"}},
			},
		},
		{
			name: "a pending intent back restarts the others", owns: []string{"tenant-v", "tenant-w", "tenant-y", "tenant-z"}, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: yz, pending: []string{"tenant-v", "tenant-w"}, entered: []string{"tenant-v", "tenant-w"}},
				{at: 20 * time.Second, answer: []string{"tenant-v", "tenant-y", "tenant-z"}, pending: []string{"tenant-w"},
					cancelled: []string{"tenant-v"}, restarted: []string{"tenant-w"}},
				{at: 40 * time.Second, answer: []string{"tenant-v", "tenant-y", "tenant-z"}, pending: []string{"tenant-w"}},
				{at: 50 * time.Second, answer: []string{"tenant-v", "tenant-y", "tenant-z"}, marked: []string{"tenant-w"}},
			},
		},
		{
			name: "an answer declaring more restarts the period", owns: yzv, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: 20 * time.Second, answer: []string{"tenant-x", "tenant-y", "tenant-z"}, pending: []string{"tenant-v"}, restarted: []string{"tenant-v"}},
				{at: 45 * time.Second, answer: []string{"tenant-x", "tenant-y", "tenant-z"}, pending: []string{"tenant-v"}},
				{at: 50 * time.Second, answer: []string{"tenant-x", "tenant-y", "tenant-z"}, marked: []string{"tenant-v"}},
			},
		},
		{
			name: "a confirmation of the pending set marks it at once", owns: yzv, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: yz, pending: []string{"tenant-v"}, entered: []string{"tenant-v"}},
				{at: time.Second, answer: yz, confirm: true, marked: []string{"tenant-v"}},
			},
		},
		{
			name: "a confirmed hold marks at once", owns: yzv, after: 30 * time.Second,
			steps: []settleStep{
				{at: 0, answer: nil, held: true},
				{at: time.Second, answer: nil, confirm: true, marked: yzv},
			},
		},
		{
			name: "no settle period: marked at the first answer without it", owns: yzv, after: 0,
			steps: []settleStep{
				{at: 0, answer: yz, marked: []string{"tenant-v"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { runSettle(t, tc.owns, tc.after, tc.steps) })
	}
}

// A confirmation left stored names one pending set: the same intents
// pending again later (another period) are not marked by it.
func TestSettle_StaleConfirmationDoesNotMatchALaterPendingSet(t *testing.T) {
	live := stored(owned("gitops", "v.yaml", l2("v", 100)), owned("gitops", "y.yaml", l2("y", 101)), owned("gitops", "z.yaml", l2("z", 102)))
	snap := docs(doc("y.yaml", l2("y", 101)), doc("z.yaml", l2("z", 102)))
	first := pendingState{since: map[string]time.Time{"layer2network.v": t0}, declared: 2}
	stale := &sluicev1.RegistryConfirm{Digest: pendingDigest("gitops", first.since)}
	later := pendingState{since: map[string]time.Time{"layer2network.v": t0.Add(time.Hour)}, declared: 2}
	plan := planSync(gitops, snap, live, nil, stale, settling{pendingState: later, now: t0.Add(time.Hour + time.Second), after: 30 * time.Second})
	if len(plan.marked) > 0 || plan.confirmed != "" {
		t.Fatalf("marked %v confirmed %q: a confirmation of an earlier pending set marked a later one", plan.marked, plan.confirmed)
	}
}

// The same for a held deletion: the registry answered empty, an operator
// confirmed the hold and the intents were marked; the registry declared
// them again (they were restored), and months later answers empty again.
// The confirmation left stored names the first hold: the second, of the
// same intents, is held, not carried out. It used to be carried out at
// once (the digest named only the registry and the intents).
func TestSettle_StaleConfirmationDoesNotMatchALaterHold(t *testing.T) {
	live := stored(owned("gitops", "v.yaml", l2("v", 100)), owned("gitops", "y.yaml", l2("y", 101)))
	empty := docs()
	first := planSync(gitops, empty, live, nil, nil, settling{pendingState: pendingState{declared: 2}, now: t0, after: 30 * time.Second})
	if first.held == nil {
		t.Fatalf("an empty answer was not held: %+v", first)
	}
	confirm := &sluicev1.RegistryConfirm{Digest: first.held.GetDigest()}
	pend := afterAnswer(first, empty)
	// The same hold after an outage keeps its start, and its confirmation applies.
	pend = pend.afterFailure()
	carried := planSync(gitops, empty, live, nil, confirm, settling{pendingState: pend, now: t0.Add(time.Minute), after: 30 * time.Second})
	if len(carried.marked) != 2 || carried.confirmed != first.held.GetDigest() {
		t.Fatalf("the confirmed hold: marked %v confirmed %q, want both marked", carried.marked, carried.confirmed)
	}
	// Declared again, then dropped again much later: a new hold.
	again := docs(doc("v.yaml", l2("v", 100)), doc("y.yaml", l2("y", 101)))
	back := planSync(gitops, again, live, nil, confirm, settling{pendingState: afterAnswer(carried, empty), now: t0.Add(time.Hour), after: 30 * time.Second})
	later := planSync(gitops, empty, live, nil, confirm, settling{pendingState: afterAnswer(back, again), now: t0.Add(90 * 24 * time.Hour), after: 30 * time.Second})
	if later.held == nil || len(later.marked) > 0 || later.confirmed != "" {
		t.Fatalf("the later hold: held %v marked %v confirmed %q; want held, nothing marked", later.held, later.marked, later.confirmed)
	}
	if later.held.GetDigest() == first.held.GetDigest() {
		t.Fatalf("the later hold has the first hold's digest %s", first.held.GetDigest())
	}
	// A restarted configurator reads the hold back from the status: the same digest.
	restarted := planSync(gitops, empty, live, nil, nil, settling{pendingState: pendingOf(&sluicev1.RegistryStatus{Held: later.held, Declared: 0}),
		now: t0.Add(91 * 24 * time.Hour), after: 30 * time.Second})
	if restarted.held.GetDigest() != later.held.GetDigest() {
		t.Fatalf("after a restart the hold's digest is %s, want %s (the status's)", restarted.held.GetDigest(), later.held.GetDigest())
	}
}

// What the status records of a pending set: each intent with when it
// becomes effective, and a digest to confirm.
func TestSettle_PendingListAndRoundTrip(t *testing.T) {
	pending := map[string]time.Time{"layer2network.b": t0.Add(time.Second), "layer2network.a": t0}
	list := pendingList(pending, 30*time.Second)
	if len(list) != 2 || list[0].GetIntent() != "layer2network/a" || !list[0].GetEffectiveAt().AsTime().Equal(t0.Add(30*time.Second)) {
		t.Fatalf("pending list %v, want a first, effective 30s after it went missing", list)
	}
	back := pendingOf(&sluicev1.RegistryStatus{Pending: list, Declared: 4})
	if back.declared != 4 || len(back.since) != 2 || pendingDigest("gitops", back.since) != pendingDigest("gitops", pending) {
		t.Fatalf("read back %v, want the same pending set (a restarted configurator carries on with it)", back)
	}
	if got := whenList(pending, 30*time.Second, []string{"layer2network/a"}); !strings.Contains(got, "layer2network/a at 2026-05-01T12:00:30Z") {
		t.Errorf("whenList %q, want the effective time", got)
	}
}

func TestDeleteAfter_DefaultIsTwiceTheSyncIntervalAtLeast30s(t *testing.T) {
	every := func(d time.Duration) *sluicev1.RegistrySpec {
		return &sluicev1.RegistrySpec{Name: "r", SyncInterval: durationpb.New(d)}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		spec *sluicev1.RegistrySpec
		want time.Duration
	}{
		{"the default sync interval (30s)", Config{}, &sluicev1.RegistrySpec{Name: "r"}, 2 * registry.DefaultSyncInterval},
		{"a 1s sync interval: at least 30s", Config{}, every(time.Second), minDeleteAfter},
		{"a 5m sync interval", Config{}, every(5 * time.Minute), 10 * time.Minute},
		{"an explicit 0 is used as given", Config{DeleteAfter: new(time.Duration(0))}, every(time.Minute), 0},
		{"an explicit 5s is used as given", Config{DeleteAfter: new(5 * time.Second)}, every(time.Minute), 5 * time.Second},
	} {
		if got := tc.cfg.deleteAfter(tc.spec); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := New(Config{Conn: &nats.Conn{}, DeleteAfter: new(-time.Second)}); err == nil || !strings.Contains(err.Error(), "DeleteAfter -1s: a settle period cannot be negative") {
		t.Errorf("New with a negative DeleteAfter: %v, want an error naming the field", err)
	}
}
