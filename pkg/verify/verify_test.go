package verify_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func sel(kv ...string) *sluicev1.NodeSelector {
	if len(kv) == 0 {
		return nil
	}
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &sluicev1.NodeSelector{MatchLabels: m}
}

func l2(name string, vlan, vni, mtu uint32, vrf string, gws []string, s *sluicev1.NodeSelector) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: vlan, Vni: vni, Mtu: mtu, Vrf: vrf, AnycastGateways: gws, NodeSelector: s}}}
}

func route(name, vrf string, seq uint32, imports, exports []string, community string, s *sluicev1.NodeSelector) *sluicev1.Intent {
	r := &sluicev1.VRFRoute{Vrf: vrf, Sequence: seq, Community: community, NodeSelector: s}
	for _, c := range imports {
		r.Import = append(r.Import, &sluicev1.PrefixItem{Cidr: c})
	}
	for _, c := range exports {
		r.Export = append(r.Export, &sluicev1.PrefixItem{Cidr: c})
	}
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: r}}
}

func table(name string, id uint32, s *sluicev1.NodeSelector) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id, NodeSelector: s}}}
}

// zones is a fleet of n nodes per zone, labelled zone and rack.
func zones(n int, zs ...string) []verify.Node {
	var out []verify.Node
	for _, z := range zs {
		for i := range n {
			out = append(out, verify.Node{Name: fmt.Sprintf("%s-node-%02d", z, i), Labels: map[string]string{"zone": z, "rack": fmt.Sprintf("%s-r%d", z, i%2)}})
		}
	}
	return out
}

// examples is the set examples/*.yaml declares.
func examples(t *testing.T) []*sluicev1.Intent {
	t.Helper()
	ins, err := intent.ParseFiles("../../examples/layer2.yaml", "../../examples/vrf.yaml", "../../examples/tables.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

func TestVerify_Rules(t *testing.T) {
	gwA := []string{"10.0.100.1/24"}
	fleet := zones(4, "zone-a", "zone-b")
	tests := []struct {
		name     string
		intents  []*sluicev1.Intent
		nodes    []verify.Node
		strategy *sluicev1.Strategy
		want     []string // rule ids, in order
		wantIn   string   // a phrase the first finding's message or fix holds
	}{
		{name: "the examples are clean", intents: nil, nodes: fleet, want: nil},
		{name: "one VNI, two VLANs on disjoint zones",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "", nil, sel("zone", "zone-a")), l2("b", 101, 5000, 0, "", nil, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleVNIVLAN}, wantIn: "VNI 5000 is one network across the fabric but its layer2 networks give it 2 VLANs: 100 (layer2network/a), 101 (layer2network/b)"},
		{name: "one VNI, two MTUs (the default counts as 1500)",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "", nil, sel("zone", "zone-a")), l2("b", 100, 5000, 9000, "", nil, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleVNIMTU}, wantIn: "1500 (layer2network/a), 9000 (layer2network/b)"},
		{name: "one VNI, the default MTU written out is the same",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "", nil, sel("zone", "zone-a")), l2("b", 100, 5000, 1500, "", nil, sel("zone", "zone-b"))},
			nodes:   fleet, want: nil},
		{name: "one VNI, two gateways",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "t", gwA, sel("zone", "zone-a")), l2("b", 100, 5000, 0, "t", []string{"10.0.100.2/24"}, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleVNIGateways}},
		{name: "one VNI, two VRFs",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "t1", gwA, sel("zone", "zone-a")), l2("b", 100, 5000, 0, "t2", gwA, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleVNIVRF}},
		{name: "one VLAN, two VNIs",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "", nil, sel("zone", "zone-a")), l2("b", 100, 5001, 0, "", nil, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleVLANVNIs}},
		{name: "one gateway address in two networks of one VRF",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "t", gwA, sel("zone", "zone-a")), l2("b", 200, 5001, 0, "t", []string{"10.0.100.1/25"}, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleGatewayShared}, wantIn: "anycast gateway 10.0.100.1 in VRF t is on 2 layer2 networks"},
		{name: "one gateway address in two VRFs is two routing domains",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "t1", gwA, sel("zone", "zone-a")), l2("b", 200, 5001, 0, "t2", gwA, sel("zone", "zone-b")),
				route("t1", "t1", 10, nil, nil, "", nil), route("t2", "t2", 10, nil, nil, "", nil)},
			nodes: fleet, want: nil},
		{name: "a VRF route in a typo of an established VRF",
			intents: append(examples(t), route("typo", "tenant-aa", 20, nil, []string{"10.9.0.0/16"}, "", nil)),
			nodes:   fleet, want: []string{verify.RuleVRFUnknown}, wantIn: `VRF "tenant-aa" is named by vrfroute/typo only: no other intent routes, leaks or binds a table in it; did you mean "tenant-a"?`},
		{name: "no-such-vrf is far from every VRF: no guess, still a warning",
			intents: append(examples(t), route("typo", "no-such-vrf", 20, nil, nil, "", nil)),
			nodes:   fleet, want: []string{verify.RuleVRFUnknown}, wantIn: "if it is a new VRF, ignore this"},
		{name: "one lone VRF with nothing established is a first VRF, not a typo",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "t1", gwA, nil)}, nodes: fleet, want: nil},
		{name: "two routing tables of one id under two names",
			intents: []*sluicev1.Intent{table("x", 10, sel("zone", "zone-a")), table("y", 10, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleTableShared}},
		{name: "two VRFs hashed to one kernel table on one node",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "vrf-556", gwA, nil), l2("b", 200, 5001, 0, "vrf-1960", []string{"10.0.200.1/24"}, sel("zone", "zone-b"))},
			nodes:   fleet, want: []string{verify.RuleVRFTableCollision}, wantIn: "VRFs vrf-1960 and vrf-556 both take kernel table base + 51056"},
		{name: "two VRFs hashed to one kernel table on no common node",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "vrf-556", gwA, sel("zone", "zone-a")), l2("b", 200, 5001, 0, "vrf-1960", []string{"10.0.200.1/24"}, sel("zone", "zone-b"))},
			nodes:   fleet},
		{name: "two VRFs hashed to one kernel table, one bound to a table of its own",
			intents: []*sluicev1.Intent{l2("a", 100, 5000, 0, "vrf-556", gwA, nil), l2("b", 200, 5001, 0, "vrf-1960", []string{"10.0.200.1/24"}, nil), table("vrf-556", 556, nil),
				route("vrf-1960", "vrf-1960", 10, nil, nil, "", nil)},
			nodes: fleet},
		{name: "a prefix leaked both ways between two VRFs",
			intents: []*sluicev1.Intent{route("a", "t1", 10, []string{"10.5.0.0/16"}, []string{"10.5.0.0/16"}, "", nil),
				route("b", "t2", 10, []string{"10.5.0.0/16"}, []string{"10.5.0.0/16"}, "", nil)},
			nodes: fleet, want: []string{verify.RuleLeakCycle}},
		{name: "a prefix exported with two communities",
			intents: []*sluicev1.Intent{route("a", "t1", 10, nil, []string{"10.6.0.0/16"}, "65000:1", sel("zone", "zone-a")),
				route("b", "t1", 11, nil, []string{"10.6.0.0/16"}, "65000:2", sel("zone", "zone-b"))},
			nodes: fleet, want: []string{verify.RuleExportCommunities}},
		{name: "a failure domain no node carries",
			intents: examples(t), nodes: fleet, strategy: &sluicev1.Strategy{FailureDomain: "zonee"},
			want: []string{verify.RuleDomainMissing}, wantIn: `failure domain "zonee": none of the 8 present nodes has that label, so every node is in one domain "(unlabelled)" and the rollout takes them all in one stage; did you mean "zone"?`},
		{name: "a failure domain some nodes lack",
			intents: examples(t), nodes: append(zones(2, "zone-a"), verify.Node{Name: "bare"}), strategy: &sluicev1.Strategy{FailureDomain: "zone"},
			want: []string{verify.RuleDomainPartial}, wantIn: "1 of the 3 present nodes have no such label"},
		{name: "a failure domain every node carries", intents: examples(t), nodes: fleet, strategy: &sluicev1.Strategy{FailureDomain: "rack"}},
		{name: "a first wave and maxParallel beyond the fleet",
			intents: examples(t), nodes: fleet, strategy: &sluicev1.Strategy{FirstWave: 20, MaxParallel: "50"},
			want: []string{verify.RuleStrategyExceeds, verify.RuleStrategyExceeds}},
		{name: "no nodes present: the strategy rules say nothing",
			intents: examples(t), strategy: &sluicev1.Strategy{FailureDomain: "zonee", FirstWave: 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ins := tt.intents
			if ins == nil && tt.want == nil {
				ins = examples(t)
			}
			if errs := intent.Validate(ins); len(errs) > 0 {
				t.Fatalf("the test's intents break a per-node rule: %v", errs)
			}
			got := verify.Verify(verify.Input{Intents: ins, Nodes: tt.nodes, Strategy: tt.strategy})
			var ids []string
			for _, f := range got {
				ids = append(ids, f.GetRule())
				if f.GetMessage() == "" || f.GetFix() == "" || f.GetSeverity() == sluicev1.Severity_SEVERITY_UNSPECIFIED {
					t.Errorf("finding %s lacks a message, fix or severity: %v", f.GetRule(), f)
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Fatalf("rules = %v, want %v\n%s", ids, tt.want, formatAll(got))
			}
			if tt.wantIn != "" && !strings.Contains(got[0].GetMessage()+" "+got[0].GetFix(), tt.wantIn) {
				t.Errorf("finding %q\nlacks %q", verify.Format(got[0]), tt.wantIn)
			}
		})
	}
}

func formatAll(fs []*sluicev1.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(verify.Format(f))
		b.WriteByte('\n')
	}
	return b.String()
}

// A finding names its intents and up to three example nodes, the smallest
// names among those the intents reach, and counts them all.
func TestVerify_FindingNamesIntentsAndExampleNodes(t *testing.T) {
	ins := []*sluicev1.Intent{l2("b", 101, 5000, 0, "", nil, sel("zone", "zone-b")), l2("a", 100, 5000, 0, "", nil, sel("zone", "zone-a"))}
	nodes := append(zones(4, "zone-a", "zone-b"), verify.Node{Name: "aaa-elsewhere", Labels: map[string]string{"zone": "zone-c"}})
	got := verify.Verify(verify.Input{Intents: ins, Nodes: nodes})
	if len(got) != 1 {
		t.Fatalf("findings:\n%s", formatAll(got))
	}
	f := got[0]
	if !slices.Equal(f.GetIntents(), []string{"layer2network/a", "layer2network/b"}) {
		t.Errorf("intents = %v", f.GetIntents())
	}
	if want := []string{"zone-a-node-00", "zone-a-node-01", "zone-a-node-02"}; !slices.Equal(f.GetNodes(), want) || f.GetNodeCount() != 8 {
		t.Errorf("nodes = %v (%d), want %v (8): the nodes the two networks reach", f.GetNodes(), f.GetNodeCount(), want)
	}
	if f.GetSeverity() != sluicev1.Severity_SEVERITY_ERROR {
		t.Errorf("severity = %v", f.GetSeverity())
	}
	if s := verify.Format(f); !strings.HasPrefix(s, "error vni-vlan-mismatch: ") || !strings.Contains(s, "and 5 more)") {
		t.Errorf("Format = %q", s)
	}
}

// Errors sort before warnings, whatever the rule ids' order.
func TestVerify_ErrorsFirst(t *testing.T) {
	ins := []*sluicev1.Intent{l2("a", 100, 5000, 0, "", nil, sel("zone", "zone-a")), l2("b", 100, 5001, 0, "", nil, sel("zone", "zone-b")),
		table("x", 10, sel("zone", "zone-a")), table("y", 10, sel("zone", "zone-b"))}
	got := verify.Verify(verify.Input{Intents: ins, Nodes: zones(1, "zone-a", "zone-b")})
	if len(got) != 2 || got[0].GetRule() != verify.RuleTableShared || got[1].GetRule() != verify.RuleVLANVNIs {
		t.Fatalf("findings:\n%s", formatAll(got))
	}
	if !verify.Refuses(got, false) || verify.Refuses(got[1:], false) || !verify.Refuses(got[1:], true) {
		t.Error("Refuses: an error refuses; a warning only when strict")
	}
}
