package change_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func l2(name string, vlan uint32, vrf string) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: vlan, Vni: vlan, Vrf: vrf, AnycastGateways: []string{"10.0.0.1/24"}}}}
}

func stored(entries ...*sluicev1.StoredIntent) map[string]change.Stored {
	out := map[string]change.Stored{}
	for i, e := range entries {
		k := intent.Key(e.GetIntent())
		out[k] = change.Stored{Key: k, Value: e, Revision: uint64(i + 1)}
	}
	return out
}

func ids(ins []*sluicev1.Intent) []string {
	var out []string
	for _, in := range ins {
		out = append(out, intent.ID(in))
	}
	return out
}

func TestApply_CreatedUpdatedUnchangedAndPriors(t *testing.T) {
	a, b, c := l2("a", 100, ""), l2("b", 101, ""), l2("c", 102, "")
	marked := &sluicev1.StoredIntent{Intent: l2("m", 103, ""), MarkedForDeletion: true}
	live := stored(&sluicev1.StoredIntent{Intent: a}, &sluicev1.StoredIntent{Intent: b}, marked)
	b2 := l2("b", 201, "")
	plan := change.Apply(live, map[string]uint64{"layer2network.u": 9},
		[]*sluicev1.Intent{c, b2, a, l2("m", 103, ""), l2("u", 104, "")})

	if want := []string{"layer2network/c", "layer2network/m", "layer2network/u"}; !slices.Equal(plan.Created, want) {
		t.Errorf("created %v, want %v (a marked intent applied again is created again)", plan.Created, want)
	}
	if want := []string{"layer2network/b"}; !slices.Equal(plan.Updated, want) {
		t.Errorf("updated %v, want %v", plan.Updated, want)
	}
	if want := []string{"layer2network/a"}; !slices.Equal(plan.Unchanged, want) {
		t.Errorf("unchanged %v, want %v", plan.Unchanged, want)
	}
	if got, want := ids(plan.Writes), []string{"layer2network/b", "layer2network/c", "layer2network/m", "layer2network/u"}; !slices.Equal(got, want) {
		t.Errorf("writes %v, want %v", got, want)
	}
	if got, want := ids(plan.Set), []string{"layer2network/a", "layer2network/b", "layer2network/c", "layer2network/m", "layer2network/u"}; !slices.Equal(got, want) {
		t.Errorf("set %v, want %v", got, want)
	}
	priors := map[string]*sluicev1.PriorIntent{}
	for _, p := range plan.Prior {
		priors[p.GetKey()] = p
	}
	if p := priors["layer2network.b"]; p.GetKvRevision() != 2 || p.GetValue().GetIntent().GetLayer2Network().GetVlan() != 101 {
		t.Errorf("b's prior %v, want its stored value at revision 2", p)
	}
	if p := priors["layer2network.u"]; p.GetKvRevision() != 9 || p.GetValue() != nil {
		t.Errorf("u's prior %v, want the unreadable value's revision 9 and no value", p)
	}
	if p := priors["layer2network.c"]; p == nil || p.GetKvRevision() != 0 {
		t.Errorf("c's prior %v, want an empty prior (created)", p)
	}
}

func TestEffective_LeavesOutMarked(t *testing.T) {
	live := stored(&sluicev1.StoredIntent{Intent: l2("b", 101, "")}, &sluicev1.StoredIntent{Intent: l2("a", 100, "")},
		&sluicev1.StoredIntent{Intent: l2("m", 103, ""), MarkedForDeletion: true})
	if got, want := ids(change.Effective(live)), []string{"layer2network/a", "layer2network/b"}; !slices.Equal(got, want) {
		t.Fatalf("effective %v, want %v", got, want)
	}
}

func TestMarkedDependencies(t *testing.T) {
	net := l2("tenant-a", 100, "tenant-a")
	route := &sluicev1.Intent{Name: "leak", Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{Vrf: "tenant-a", Sequence: 1}}}
	m := &sluicev1.StoredIntent{Intent: net, Source: "gitops", Origin: "n.yaml", MarkedForDeletion: true}
	errs := change.MarkedDependencies([]*sluicev1.Intent{route}, []*sluicev1.Intent{route}, stored(m))
	if len(errs) != 1 || errs[0].GetIntent() != "vrfroute/leak" || !strings.Contains(errs[0].GetRule(), "layer2network/tenant-a") {
		t.Fatalf("errs %v, want the route rejected naming the marked network", errs)
	}
	if errs := change.MarkedDependencies([]*sluicev1.Intent{route}, []*sluicev1.Intent{route, net}, stored(m)); len(errs) > 0 {
		t.Fatalf("errs %v although a live network routes in the VRF", errs)
	}
}

func TestKnownBad_NamesThePresentNodesThatWouldGetARecordedFingerprint(t *testing.T) {
	rev := &sluicev1.Revision{Intents: []*sluicev1.Intent{{Name: "a", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: 100, Vni: 100, AnycastGateways: []string{"10.0.0.1/24"}, NodeSelector: &sluicev1.NodeSelector{MatchLabels: map[string]string{"zone": "z1"}}}}}}}
	z1 := map[string]string{"zone": "z1"}
	bad := render.Fingerprint(render.NodeConfig(rev, z1))
	nodes := []store.Entry[*sluicev1.NodePresence]{
		{Key: "n2", Value: &sluicev1.NodePresence{Labels: z1}},
		{Key: "n1", Value: &sluicev1.NodePresence{Labels: z1}},
		{Key: "n3", Value: &sluicev1.NodePresence{Labels: map[string]string{"zone": "z2"}}},
	}
	records := []store.Entry[*sluicev1.InvalidFingerprint]{
		{Key: bad, Value: &sluicev1.InvalidFingerprint{Node: "n9", Check: "mgmt", Output: "unreachable\nagain"}},
	}
	hits := change.KnownBad(rev, nodes, change.Known(records))
	if len(hits) != 2 || hits[0].Node != "n1" || hits[1].Node != "n2" {
		t.Fatalf("hits %v, want n1 and n2 (z1), in order", hits)
	}
	if got := hits[0].Describe(100); !strings.Contains(got, "check-failed on n9") || !strings.Contains(got, "check mgmt: unreachable again") {
		t.Errorf("describe %q", got)
	}
	records[0].Value.Forgiven = &sluicev1.Forgiveness{By: "ops"}
	if hits := change.KnownBad(rev, nodes, change.Known(records)); len(hits) != 0 {
		t.Fatalf("hits %v after the fingerprint was forgiven", hits)
	}
}
