package cli

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func table(name string, id uint32) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id}}}
}

func ran(node string, labels map[string]string, intents ...*sluicev1.Intent) nodeAnswer {
	return nodeAnswer{Node: node, Labels: labels, Config: &sluicev1.DesiredConfig{Node: node, Revision: "rev1", Fingerprint: "fp-" + node,
		Config: &sluicev1.NodeConfig{Intents: intents}}}
}

func zone(z, rack string) map[string]string { return map[string]string{"zone": z, "rack": rack} }

// The decision of `sluice recover --from-nodes`: union, conflicts, the
// selector of the labels common to an intent's nodes, and the check that it
// picks no node that runs without it.
func TestRebuildIntents(t *testing.T) {
	type want struct {
		selectors   map[string]map[string]string // intent id → selector (nil: none)
		overSelects map[string][]string
		unasked     map[string][]string
		conflicts   []string
		review      bool
	}
	for _, tc := range []struct {
		name  string
		given []nodeAnswer
		want  want
	}{{
		name: "an intent on every node gets the labels they all share",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("mgmt", 10)),
			ran("n2", zone("b", "r1"), table("mgmt", 10)),
		},
		want: want{selectors: map[string]map[string]string{"routingtable/mgmt": {"rack": "r1"}}},
	}, {
		name: "nodes that share no label: no selector, every node",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("mgmt", 10)),
			ran("n2", zone("b", "r2"), table("mgmt", 10)),
		},
		want: want{selectors: map[string]map[string]string{"routingtable/mgmt": nil}},
	}, {
		name: "an intent on one zone selects that zone and no other node",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("mgmt", 10), table("storage", 20)),
			ran("n2", zone("a", "r2"), table("mgmt", 10), table("storage", 20)),
			ran("n3", zone("b", "r1"), table("mgmt", 10)),
		},
		want: want{selectors: map[string]map[string]string{"routingtable/mgmt": nil, "routingtable/storage": {"zone": "a"}}},
	}, {
		name: "a selector that would over-select is marked for an edit",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("storage", 20)),
			ran("n2", zone("a", "r1")),
		},
		want: want{
			selectors:   map[string]map[string]string{"routingtable/storage": {"zone": "a", "rack": "r1", EditLabel: "true"}},
			overSelects: map[string][]string{"routingtable/storage": {"n2"}},
			review:      true,
		},
	}, {
		name: "a node holding no last-good counts as running none of them",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("mgmt", 10)),
			{Node: "n2", Labels: zone("a", "r1")},
			{Node: "n3", Labels: zone("b", "r1")},
		},
		want: want{
			selectors:   map[string]map[string]string{"routingtable/mgmt": {"rack": "r1", "zone": "a", EditLabel: "true"}},
			overSelects: map[string][]string{"routingtable/mgmt": {"n2"}},
			review:      true,
		},
	}, {
		name: "same kind and name, different content: a conflict, not written",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("mgmt", 10), table("storage", 20)),
			ran("n2", zone("b", "r1"), table("mgmt", 11), table("storage", 20)),
		},
		want: want{
			selectors: map[string]map[string]string{"routingtable/storage": {"rack": "r1"}},
			conflicts: []string{"routingtable/mgmt"},
			review:    true,
		},
	}, {
		name: "a node that did not answer: not in the union, named when a selector picks it",
		given: []nodeAnswer{
			ran("n1", zone("a", "r1"), table("storage", 20)),
			{Node: "n2", Labels: zone("a", "r1"), Err: "no answer within 5s"},
			{Node: "n3", Labels: zone("b", "r1"), Err: "no answer within 5s"},
		},
		want: want{
			selectors: map[string]map[string]string{"routingtable/storage": {"zone": "a", "rack": "r1"}},
			unasked:   map[string][]string{"routingtable/storage": {"n2"}},
			review:    true,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// Any order of answers gives the same outcome.
			for _, given := range [][]nodeAnswer{tc.given, reversed(tc.given)} {
				r := rebuildIntents(given)
				got := map[string]map[string]string{}
				over, unasked := map[string][]string{}, map[string][]string{}
				for _, in := range r.Intents {
					got[in.ID] = intent.Selector(in.Intent).GetMatchLabels()
					if in.OverSelects != nil {
						over[in.ID] = in.OverSelects
					}
					if in.Unasked != nil {
						unasked[in.ID] = in.Unasked
					}
					if intent.ID(in.Intent) != in.ID {
						t.Errorf("intent %s carries id %s", intent.ID(in.Intent), in.ID)
					}
				}
				if !maps.EqualFunc(got, tc.want.selectors, maps.Equal) {
					t.Errorf("selectors %v, want %v", got, tc.want.selectors)
				}
				if !maps.EqualFunc(over, noneIfNil(tc.want.overSelects), slices.Equal) {
					t.Errorf("over-selects %v, want %v", over, tc.want.overSelects)
				}
				if !maps.EqualFunc(unasked, noneIfNil(tc.want.unasked), slices.Equal) {
					t.Errorf("unasked %v, want %v", unasked, tc.want.unasked)
				}
				var conflicts []string
				for _, c := range r.Conflicts {
					conflicts = append(conflicts, c.ID)
					if len(c.Variants) < 2 {
						t.Errorf("conflict %s lists %d variants, want both", c.ID, len(c.Variants))
					}
				}
				if !slices.Equal(conflicts, tc.want.conflicts) {
					t.Errorf("conflicts %v, want %v", conflicts, tc.want.conflicts)
				}
				if r.NeedsReview() != tc.want.review {
					t.Errorf("needs review %v, want %v", r.NeedsReview(), tc.want.review)
				}
			}
		})
	}
}

// Kubernetes nodes share dozens of labels, more than a selector may hold:
// the selector keeps the ones that exclude the other nodes, and is valid.
func TestRebuildIntents_ManySharedLabels_SelectorWithinTheLimit(t *testing.T) {
	shared := func(z string) map[string]string {
		l := map[string]string{"zone": z}
		for i := range 100 {
			l[fmt.Sprintf("feature.node.kubernetes.io/f-%03d", i)] = "true"
		}
		return l
	}
	r := rebuildIntents([]nodeAnswer{
		ran("n1", shared("a"), table("storage", 20)),
		ran("n2", shared("a"), table("storage", 20)),
		ran("n3", shared("b")),
	})
	if len(r.Intents) != 1 {
		t.Fatalf("rebuilt %d intents, want 1", len(r.Intents))
	}
	in := r.Intents[0]
	sel := intent.Selector(in.Intent).GetMatchLabels()
	if !in.Cut || len(sel) != contract.MaxSelectorLabels || sel["zone"] != "a" || len(in.OverSelects) != 0 {
		t.Fatalf("selector of %d labels (zone=%q), cut %v, over-selects %v; want %d labels with zone=a", len(sel), sel["zone"], in.Cut, in.OverSelects, contract.MaxSelectorLabels)
	}
	if errs := intent.Validate([]*sluicev1.Intent{in.Intent}); len(errs) > 0 {
		t.Fatalf("the rebuilt intent is not valid: %v", errs)
	}
}

func reversed(in []nodeAnswer) []nodeAnswer {
	out := slices.Clone(in)
	slices.Reverse(out)
	return out
}

func noneIfNil(m map[string][]string) map[string][]string {
	if m == nil {
		return map[string][]string{}
	}
	return m
}

// The files are what `sluice apply -f` reads: every kind, its selector
// and its fields parse back to the intent rebuilt.
func TestRebuiltIntents_ParseBackAsWritten(t *testing.T) {
	l2 := &sluicev1.Intent{Name: "tenant-a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: 100, Vni: 10100, Mtu: 9000, AnycastGateways: []string{"10.0.100.1/24"}, Vrf: "tenant-a"}}}
	vrf := &sluicev1.Intent{Name: "leak", Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{
		Vrf: "tenant-a", Sequence: 10, Import: []*sluicev1.PrefixItem{{Cidr: "10.0.0.0/8", Le: 24}}, Community: "65000:1"}}}
	r := rebuildIntents([]nodeAnswer{
		ran("n1", zone("a", "r1"), l2, vrf, table("mgmt", 10)),
		ran("n2", zone("b", "r1"), table("mgmt", 10)),
	})
	dir := t.TempDir()
	if err := writeIntents(dir, r); err != nil {
		t.Fatal(err)
	}
	stdout := filepath.Join(t.TempDir(), "all.yaml")
	if err := os.WriteFile(stdout, []byte(intentsYAML(r)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, paths := range [][]string{{dir}, {stdout}} {
		got, err := intent.ParseFiles(paths...)
		if err != nil {
			t.Fatalf("parse %v: %v", paths, err)
		}
		if len(got) != len(r.Intents) {
			t.Fatalf("parsed %d intents from %v, want %d", len(got), paths, len(r.Intents))
		}
		for _, want := range r.Intents {
			i := slices.IndexFunc(got, func(in *sluicev1.Intent) bool { return proto.Equal(in, want.Intent) })
			if i < 0 {
				t.Errorf("%s: %v not parsed back from %v; got %v", want.ID, want.Intent, paths, got)
			}
		}
	}
}
