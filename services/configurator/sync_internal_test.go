package configurator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func l2(name string, vlan uint32) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: vlan, Vni: 10000 + vlan}}}
}

// stored builds the live intents map planSync reads: each entry's KV
// revision is its position + 1.
func stored(entries ...*sluicev1.StoredIntent) map[string]store.Entry[*sluicev1.StoredIntent] {
	out := map[string]store.Entry[*sluicev1.StoredIntent]{}
	for i, e := range entries {
		k := intent.Key(e.GetIntent())
		out[k] = store.Entry[*sluicev1.StoredIntent]{Key: k, Value: e, Revision: uint64(i + 1)}
	}
	return out
}

func owned(src, origin string, in *sluicev1.Intent) *sluicev1.StoredIntent {
	return &sluicev1.StoredIntent{Intent: in, Source: src, Origin: origin}
}

func docs(ds ...registry.Document) registry.Snapshot {
	return registry.Snapshot{Documents: ds, Version: "v"}
}

func doc(origin string, ins ...*sluicev1.Intent) registry.Document {
	return registry.Document{Origin: origin, Intents: ins}
}

// The merge's tests pass settling{}: no settle period, so what leaves the
// answer is marked at once; settle_test.go covers the period.
var gitops = &sluicev1.RegistrySpec{Name: "gitops", Source: &sluicev1.RegistrySpec_Directory{Directory: &sluicev1.DirectoryRegistry{Path: "/x"}}}

func TestPlanSync_MergesInPlace(t *testing.T) {
	live := stored(
		owned("gitops", "a.yaml", l2("a", 100)),
		owned("gitops", "b.yaml", l2("b", 101)),
		owned("gitops", "c.yaml", l2("c", 102)),
		owned("gitops", "d.yaml", l2("d", 103)),
		owned("api", "", l2("mine", 200)),
	)
	// b changed, c gone, e new, a unchanged, d unchanged.
	plan := planSync(gitops, docs(doc("a.yaml", l2("a", 100)), doc("b.yaml", l2("b", 111)), doc("d.yaml", l2("d", 103)), doc("e.yaml", l2("e", 104))),
		live, nil, nil, settling{})
	if got, want := plan.created, []string{"layer2network/e"}; !slices.Equal(got, want) {
		t.Errorf("created %v, want %v", got, want)
	}
	if got, want := plan.updated, []string{"layer2network/b"}; !slices.Equal(got, want) {
		t.Errorf("updated %v, want %v", got, want)
	}
	if got, want := plan.marked, []string{"layer2network/c"}; !slices.Equal(got, want) {
		t.Errorf("marked %v, want %v (the api's intent is not the registry's to mark)", got, want)
	}
	if plan.held != nil || len(plan.invalid) > 0 || len(plan.conflicts) > 0 {
		t.Errorf("held %v invalid %v conflicts %v, want none", plan.held, plan.invalid, plan.conflicts)
	}
	jr := plan.journal
	if jr.GetSource() != "gitops" || jr.GetOrigins()["layer2network.e"] != "e.yaml" || !slices.Equal(jr.GetMark(), []string{"layer2network.c"}) {
		t.Errorf("journal source %q origins %v mark %v", jr.GetSource(), jr.GetOrigins(), jr.GetMark())
	}
	// Every key written or marked has its prior, with the KV revision read.
	for _, p := range jr.GetPrior() {
		if e, ok := live[p.GetKey()]; ok && p.GetKvRevision() != e.Revision {
			t.Errorf("prior of %s has KV revision %d, want %d", p.GetKey(), p.GetKvRevision(), e.Revision)
		}
	}
	if len(jr.GetPrior()) != 3 {
		t.Errorf("%d priors, want 3 (b, e, c)", len(jr.GetPrior()))
	}
}

func TestPlanSync_NothingChangedWritesNothing(t *testing.T) {
	live := stored(owned("gitops", "a.yaml", l2("a", 100)))
	if plan := planSync(gitops, docs(doc("a.yaml", l2("a", 100))), live, nil, nil, settling{}); plan.journal != nil {
		t.Fatalf("journal %v for an unchanged answer", plan.journal)
	}
}

func TestPlanSync_ConflictKeepsTheOwner(t *testing.T) {
	live := stored(owned("api", "", l2("shared", 100)))
	plan := planSync(gitops, docs(doc("s.yaml", l2("shared", 300))), live, nil, nil, settling{})
	if plan.journal != nil {
		t.Fatalf("journal %v: another source's intent was overwritten", plan.journal)
	}
	if len(plan.conflicts) != 1 || plan.conflicts[0].GetIntent() != "layer2network/shared" || plan.conflicts[0].GetOwner() != "api" {
		t.Fatalf("conflicts %v, want layer2network/shared owned by api", plan.conflicts)
	}
}

func TestPlanSync_MarkedIntentOfAnotherSourceIsAdopted(t *testing.T) {
	m := owned("api", "", l2("old", 100))
	m.MarkedForDeletion = true
	plan := planSync(gitops, docs(doc("o.yaml", l2("old", 100))), stored(m), nil, nil, settling{})
	if !slices.Equal(plan.created, []string{"layer2network/old"}) || len(plan.conflicts) > 0 {
		t.Fatalf("created %v conflicts %v: a marked intent is nobody's, the registry takes it", plan.created, plan.conflicts)
	}
}

func TestPlanSync_InvalidKeepsLastValidVersion(t *testing.T) {
	live := stored(owned("gitops", "a.yaml", l2("a", 100)), owned("gitops", "b.yaml", l2("b", 101)), owned("gitops", "c.yaml", l2("c", 102)))
	bad := l2("a", 5000) // VLAN out of range
	plan := planSync(gitops, docs(
		doc("a.yaml", bad),
		registry.Document{Origin: "b.yaml", Err: errors.New("b.yaml: line 3: mapping values are not allowed here")},
		doc("c.yaml", l2("c", 102)),
	), live, nil, nil, settling{})
	if plan.journal != nil {
		t.Fatalf("journal %v: an invalid intent or a broken document changed what is stored", plan.journal)
	}
	var ids []string
	for _, fe := range plan.invalid {
		ids = append(ids, fe.GetIntent())
	}
	if !slices.Contains(ids, "layer2network/a") || !slices.Contains(ids, "b.yaml") {
		t.Fatalf("invalid %v, want layer2network/a and b.yaml reported", plan.invalid)
	}
}

func TestPlanSync_ClashWithStoredIntentLeavesOnlyTheClashOut(t *testing.T) {
	live := stored(owned("api", "", l2("api-net", 100)))
	// "x" takes VLAN 100 on every node, like api-net; "y" is fine.
	plan := planSync(gitops, docs(doc("x.yaml", l2("x", 100)), doc("y.yaml", l2("y", 101))), live, nil, nil, settling{})
	if !slices.Equal(plan.created, []string{"layer2network/y"}) {
		t.Fatalf("created %v, want only layer2network/y", plan.created)
	}
	if len(plan.invalid) == 0 || plan.invalid[0].GetIntent() != "layer2network/x" {
		t.Fatalf("invalid %v, want the clash reported on layer2network/x", plan.invalid)
	}
	if _, ok := plan.journal.GetOrigins()["layer2network.x"]; ok {
		t.Fatalf("journal still writes x: %v", plan.journal)
	}
}

func TestPlanSync_MassDeletionHeldUntilConfirmed(t *testing.T) {
	var entries []*sluicev1.StoredIntent
	for i, n := range []string{"a", "b", "c", "d"} {
		entries = append(entries, owned("gitops", n+".yaml", l2(n, uint32(100+i))))
	}
	live := stored(entries...)
	for _, tc := range []struct {
		name string
		snap registry.Snapshot
		held int
	}{
		{"empty answer", docs(), 4},
		{"three of four gone", docs(doc("a.yaml", l2("a", 100))), 3},
		{"two of four gone (the share, not more)", docs(doc("a.yaml", l2("a", 100)), doc("b.yaml", l2("b", 101))), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := planSync(gitops, tc.snap, live, nil, nil, settling{})
			if tc.held == 0 {
				if plan.held != nil || len(plan.marked) != 2 {
					t.Fatalf("held %v marked %v, want 2 marked", plan.held, plan.marked)
				}
				return
			}
			if plan.held == nil || len(plan.held.GetIntents()) != tc.held || len(plan.marked) > 0 || len(plan.journal.GetMark()) > 0 {
				t.Fatalf("held %v marked %v, want %d held and none marked", plan.held, plan.marked, tc.held)
			}
			if !strings.Contains(plan.held.GetReason(), "sluice registry confirm gitops") {
				t.Errorf("reason %q does not say how to confirm", plan.held.GetReason())
			}
			// A confirmation of another deletion does not release it; of this one does.
			if p := planSync(gitops, tc.snap, live, nil, &sluicev1.RegistryConfirm{Digest: "other"}, settling{}); p.held == nil {
				t.Fatalf("a confirmation of another digest released the hold")
			}
			p := planSync(gitops, tc.snap, live, nil, &sluicev1.RegistryConfirm{Digest: plan.held.GetDigest()}, settling{})
			if p.held != nil || len(p.marked) != tc.held || p.confirmed != plan.held.GetDigest() {
				t.Fatalf("confirmed: held %v marked %v confirmed %q", p.held, p.marked, p.confirmed)
			}
		})
	}
}

func TestPlanSync_BrokenDocumentProtectsItsIntents(t *testing.T) {
	live := stored(owned("gitops", "all.yaml", l2("a", 100)), owned("gitops", "all.yaml", l2("b", 101)), owned("gitops", "c.yaml", l2("c", 102)))
	plan := planSync(gitops, docs(registry.Document{Origin: "all.yaml", Intents: []*sluicev1.Intent{l2("a", 100)}, Err: errors.New("doc 2: bad")},
		doc("c.yaml", l2("c", 102))), live, nil, nil, settling{})
	if plan.journal != nil || plan.held != nil {
		t.Fatalf("journal %v held %v: b is in a document that did not parse, its last version stays", plan.journal, plan.held)
	}
}

func TestPlanSync_DeclaredTwice(t *testing.T) {
	plan := planSync(gitops, docs(doc("1.yaml", l2("a", 100)), doc("2.yaml", l2("a", 100))), stored(), nil, nil, settling{})
	if plan.journal != nil || len(plan.invalid) != 1 || !strings.Contains(plan.invalid[0].GetRule(), "1.yaml and 2.yaml") {
		t.Fatalf("journal %v invalid %v, want a's double declaration reported naming both files", plan.journal, plan.invalid)
	}
}
