package render_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func sel(kv ...string) *sluicev1.NodeSelector {
	if len(kv) == 0 {
		return nil
	}
	return &sluicev1.NodeSelector{MatchLabels: labels(kv...)}
}

func l2(name string, vlan uint32, s *sluicev1.NodeSelector) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: vlan, Vni: 10000 + vlan, NodeSelector: s}}}
}

func table(name string, id uint32, s *sluicev1.NodeSelector) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id, NodeSelector: s}}}
}

func route(name string, s *sluicev1.NodeSelector) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{
		Vrf: "tenant-a", Sequence: 10, Import: []*sluicev1.PrefixItem{{Cidr: "10.0.0.0/8"}}, NodeSelector: s}}}
}

func ids(intents []*sluicev1.Intent) string {
	var out []string
	for _, in := range intents {
		out = append(out, intent.ID(in))
	}
	return strings.Join(out, ",")
}

func TestSort_KindTokenThenName(t *testing.T) {
	given := []*sluicev1.Intent{
		route("b", nil), table("z", 1, nil), l2("b", 2, nil), route("a", nil), l2("a", 1, nil), table("a", 2, nil),
	}
	render.Sort(given)
	want := "layer2network/a,layer2network/b,routingtable/a,routingtable/z,vrfroute/a,vrfroute/b"
	if got := ids(given); got != want {
		t.Errorf("Sort = %s, want %s", got, want)
	}
}

func TestSelects(t *testing.T) {
	tests := []struct {
		name   string
		sel    *sluicev1.NodeSelector
		labels map[string]string
		want   bool
	}{
		{"nil selector selects every node", nil, labels("zone", "zone-a"), true},
		{"empty selector selects a node without labels", &sluicev1.NodeSelector{}, nil, true},
		{"matching label", sel("zone", "zone-a"), labels("zone", "zone-a", "rack", "rack-1"), true},
		{"other value", sel("zone", "zone-a"), labels("zone", "zone-b"), false},
		{"label missing on the node", sel("zone", "zone-a"), labels("rack", "rack-1"), false},
		{"every label must match", sel("zone", "zone-a", "rack", "rack-1"), labels("zone", "zone-a", "rack", "rack-2"), false},
		{"all of many labels match", sel("zone", "zone-a", "rack", "rack-1"), labels("zone", "zone-a", "rack", "rack-1", "role", "leaf"), true},
		{"a node without labels is not selected by a selector", sel("zone", "zone-a"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := render.Selects(tt.sel, tt.labels); got != tt.want {
				t.Errorf("Selects = %t, want %t", got, tt.want)
			}
		})
	}
}

func TestNodeConfig(t *testing.T) {
	rev := &sluicev1.Revision{Id: "r1", Intents: []*sluicev1.Intent{
		table("main2", 100, nil),
		l2("net-a", 100, sel("zone", "zone-a")),
		l2("net-b", 200, sel("zone", "zone-b")),
		route("leak-rack1", sel("zone", "zone-a", "rack", "rack-1")),
	}}
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"zone-a rack-1 gets its zone, its rack and the global table",
			labels("zone", "zone-a", "rack", "rack-1"), "layer2network/net-a,routingtable/main2,vrfroute/leak-rack1"},
		{"zone-a rack-2 misses the rack-1 route", labels("zone", "zone-a", "rack", "rack-2"), "layer2network/net-a,routingtable/main2"},
		{"zone-b", labels("zone", "zone-b"), "layer2network/net-b,routingtable/main2"},
		{"unlabelled node gets only the global table", nil, "routingtable/main2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := render.NodeConfig(rev, tt.labels)
			if got := ids(nc.GetIntents()); got != tt.want {
				t.Fatalf("NodeConfig intents = %s, want %s", got, tt.want)
			}
			for _, in := range nc.GetIntents() {
				if intent.Selector(in) != nil {
					t.Errorf("%s still has its node selector", intent.ID(in))
				}
			}
		})
	}
	if intent.Selector(rev.Intents[1]) == nil {
		t.Error("NodeConfig cleared the selector of the revision's own intent")
	}
}

func TestNodeConfig_EmptyRevisionGivesEmptyConfig(t *testing.T) {
	nc := render.NodeConfig(&sluicev1.Revision{}, labels("zone", "zone-a"))
	if len(nc.GetIntents()) != 0 {
		t.Fatalf("got %v", nc)
	}
	if render.Fingerprint(nc) != render.Fingerprint(&sluicev1.NodeConfig{}) {
		t.Error("fingerprint of an empty config is not stable")
	}
}

// manyLabels builds n labels; the selectors use a subset of them.
func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("label-%02d", i)] = fmt.Sprintf("value-%02d", i)
	}
	return m
}

// shuffledCopy rebuilds intents in a random order with freshly built selector
// maps, so nothing about the input order or map layout survives.
func shuffledCopy(r *rand.Rand, intents []*sluicev1.Intent) []*sluicev1.Intent {
	out := make([]*sluicev1.Intent, len(intents))
	for i, j := range r.Perm(len(intents)) {
		c := proto.Clone(intents[j]).(*sluicev1.Intent)
		if s := intent.Selector(c); s != nil {
			keys := make([]string, 0, len(s.MatchLabels))
			for k := range s.MatchLabels {
				keys = append(keys, k)
			}
			r.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
			fresh := make(map[string]string, len(keys))
			for _, k := range keys {
				fresh[k] = s.MatchLabels[k]
			}
			s.MatchLabels = fresh
		}
		out[i] = c
	}
	return out
}

func TestDeterminism_SameContentSameBytesWhateverTheOrder(t *testing.T) {
	nodeLabels := manyLabels(40)
	bigSel := &sluicev1.NodeSelector{MatchLabels: manyLabels(30)}
	var intents []*sluicev1.Intent
	for i := range 20 {
		intents = append(intents,
			l2(fmt.Sprintf("net-%02d", i), uint32(100+i), bigSel),
			table(fmt.Sprintf("tbl-%02d", i), uint32(1000+i), sel("label-01", "value-01", "label-07", "value-07")),
			route(fmt.Sprintf("rt-%02d", i), nil))
	}
	wantID := render.RevisionID(intents)
	wantRev := &sluicev1.Revision{Id: wantID, Intents: render.Sorted(intents)}
	wantNC := render.NodeConfig(wantRev, nodeLabels)
	wantFP := render.Fingerprint(wantNC)
	wantBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(wantNC)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(wantNC.GetIntents()); n != 60 {
		t.Fatalf("node config has %d intents, want all 60", n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		given := shuffledCopy(r, intents)
		if got := render.RevisionID(given); got != wantID {
			t.Fatalf("round %d: RevisionID = %s, want %s", i, got, wantID)
		}
		labelsCopy := map[string]string{}
		for _, k := range r.Perm(len(nodeLabels)) {
			key := fmt.Sprintf("label-%02d", k)
			labelsCopy[key] = nodeLabels[key]
		}
		nc := render.NodeConfig(&sluicev1.Revision{Id: wantID, Intents: given}, labelsCopy)
		if got := render.Fingerprint(nc); got != wantFP {
			t.Fatalf("round %d: Fingerprint = %s, want %s", i, got, wantFP)
		}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(nc)
		if string(b) != string(wantBytes) {
			t.Fatalf("round %d: node config bytes differ", i)
		}
	}
}

func TestRevisionID(t *testing.T) {
	a, b := l2("a", 100, sel("zone", "zone-a")), table("t", 100, nil)
	tests := []struct {
		name      string
		x, y      []*sluicev1.Intent
		wantEqual bool
	}{
		{"order does not matter", []*sluicev1.Intent{a, b}, []*sluicev1.Intent{b, a}, true},
		{"a changed field changes the id", []*sluicev1.Intent{a}, []*sluicev1.Intent{l2("a", 101, sel("zone", "zone-a"))}, false},
		{"a changed selector changes the id", []*sluicev1.Intent{a}, []*sluicev1.Intent{l2("a", 100, sel("zone", "zone-b"))}, false},
		{"a renamed intent changes the id", []*sluicev1.Intent{a}, []*sluicev1.Intent{l2("b", 100, sel("zone", "zone-a"))}, false},
		{"an added intent changes the id", []*sluicev1.Intent{a}, []*sluicev1.Intent{a, b}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, y := render.RevisionID(tt.x), render.RevisionID(tt.y)
			if len(x) != 64 {
				t.Fatalf("id %q is not 64 hex characters", x)
			}
			if (x == y) != tt.wantEqual {
				t.Errorf("ids %s and %s: equal = %t, want %t", x, y, x == y, tt.wantEqual)
			}
		})
	}
	given := []*sluicev1.Intent{b, a}
	render.RevisionID(given)
	if given[0] != b {
		t.Error("RevisionID reordered the caller's slice")
	}
}

func TestShort(t *testing.T) {
	id := render.RevisionID(nil)
	if got := render.Short(id); got != id[:12] {
		t.Errorf("Short = %q", got)
	}
	if got := render.Short("abc"); got != "abc" {
		t.Errorf("Short(abc) = %q", got)
	}
}
