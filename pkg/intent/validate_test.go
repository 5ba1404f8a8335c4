package intent_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

func sel(kv ...string) *sluicev1.NodeSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &sluicev1.NodeSelector{MatchLabels: m}
}

// l2 is a valid Layer2Network changed by mod.
func l2(name string, mod func(*sluicev1.Layer2Network)) *sluicev1.Intent {
	s := &sluicev1.Layer2Network{
		Vlan: 100, Vni: 10100, Mtu: 9000, AnycastGateways: []string{"10.0.100.1/24", "fd00:100::1/64"},
		Vrf: "tenant-a", NodeSelector: sel("zone", "zone-a"),
	}
	if mod != nil {
		mod(s)
	}
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: s}}
}

// vrf is a valid VRFRoute changed by mod.
func vrf(name string, mod func(*sluicev1.VRFRoute)) *sluicev1.Intent {
	s := &sluicev1.VRFRoute{
		Vrf: "tenant-a", Sequence: 10,
		Import:    []*sluicev1.PrefixItem{{Cidr: "10.0.0.0/8", Ge: 16, Le: 24}, {Cidr: "fd00::/16", Le: 64}},
		Export:    []*sluicev1.PrefixItem{{Cidr: "10.0.100.0/24"}},
		Community: "65000:100",
	}
	if mod != nil {
		mod(s)
	}
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: s}}
}

// table is a valid RoutingTable changed by mod.
func table(name string, mod func(*sluicev1.RoutingTable)) *sluicev1.Intent {
	s := &sluicev1.RoutingTable{TableId: 100}
	if mod != nil {
		mod(s)
	}
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: s}}
}

// wantErr is an expected field error: exact intent and field, and words the rule must contain.
type wantErr struct{ intent, field, ruleHas string }

func checkErrors(t *testing.T, got []*sluicev1.FieldError, want []wantErr) {
	t.Helper()
	var lines []string
	for _, fe := range got {
		lines = append(lines, intent.FormatFieldError(fe))
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n  %s", len(got), len(want), strings.Join(lines, "\n  "))
	}
	for i, w := range want {
		g := got[i]
		if g.GetIntent() != w.intent || g.GetField() != w.field || !strings.Contains(g.GetRule(), w.ruleHas) {
			t.Errorf("error %d = %q, want intent %q field %q rule containing %q", i, lines[i], w.intent, w.field, w.ruleHas)
		}
	}
}

func TestValidate_Rules(t *testing.T) {
	tests := []struct {
		name  string
		given []*sluicev1.Intent
		want  []wantErr
	}{
		{"valid intents of every kind", []*sluicev1.Intent{l2("a", nil), vrf("r", nil), table("t", nil)}, nil},
		{"empty set is valid", nil, nil},
		{"name must be a DNS label", []*sluicev1.Intent{l2("Tenant_A", nil)},
			[]wantErr{{"layer2network/Tenant_A", "name", "lower-case"}}},
		{"name must not be empty", []*sluicev1.Intent{table("", nil)},
			[]wantErr{{"routingtable/", "name", "must not be empty"}}},
		{"spec must be set", []*sluicev1.Intent{{Name: "x"}},
			[]wantErr{{"x", "spec", "no spec is set"}}},
		{"same kind and name twice", []*sluicev1.Intent{l2("a", nil), l2("a", nil)},
			[]wantErr{{"layer2network/a", "name", "given 2 times"}}},
		{"same name of different kinds is fine", []*sluicev1.Intent{l2("a", nil), table("a", nil)}, nil},

		{"vlan above 4094", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vlan = 5000 })},
			[]wantErr{{"layer2network/a", "spec.vlan", "5000 is outside 1-4094"}}},
		{"vlan missing", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vlan = 0 })},
			[]wantErr{{"layer2network/a", "spec.vlan", "VLAN id is required"}}},
		{"vni above 24 bits", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vni = 1 << 24 })},
			[]wantErr{{"layer2network/a", "spec.vni", "16777216 is outside 1-16777215"}}},
		{"vni missing", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vni = 0 })},
			[]wantErr{{"layer2network/a", "spec.vni", "VNI is required"}}},
		{"mtu 0 means the default", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Mtu = 0 })}, nil},
		{"mtu below 1000", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Mtu = 576 })},
			[]wantErr{{"layer2network/a", "spec.mtu", "576 is outside 1000-9216"}}},
		{"mtu above 9216", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Mtu = 9217 })},
			[]wantErr{{"layer2network/a", "spec.mtu", "9217 is outside 1000-9216"}}},
		{"gateway not a CIDR", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.AnycastGateways[1] = "10.0.0.300/24" })},
			[]wantErr{{"layer2network/a", "spec.anycastGateways[1]", `"10.0.0.300/24" is not an address in CIDR form`}}},
		{"gateway without prefix length", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.AnycastGateways[0] = "10.0.0.1" })},
			[]wantErr{{"layer2network/a", "spec.anycastGateways[0]", `"10.0.0.1" is not an address in CIDR form`}}},
		{"gateway is the network address", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.AnycastGateways[0] = "10.0.100.0/24" })},
			[]wantErr{{"layer2network/a", "spec.anycastGateways[0]", "network address of 10.0.100.0/24; give the gateway's own address, e.g. 10.0.100.1/24"}}},
		{"a /32 gateway is its own network", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.AnycastGateways = []string{"10.0.0.0/32"} })}, nil},
		{"gateways need a vrf", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vrf = "" })},
			[]wantErr{{"layer2network/a", "spec.vrf", "required when anycastGateways are set"}}},
		{"no gateways, no vrf needed", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vrf, s.AnycastGateways = "", nil })}, nil},
		{"vrf must be a valid name", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.Vrf = "Tenant A" })},
			[]wantErr{{"layer2network/a", "spec.vrf", `"Tenant A" must be lower-case`}}},
		{"selector label key empty", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("", "x") })},
			[]wantErr{{"layer2network/a", "spec.nodeSelector.matchLabels", "label key is empty"}}},
		{"selector label value empty", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("zone", "") })},
			[]wantErr{{"layer2network/a", "spec.nodeSelector.matchLabels.zone", `label "zone" has an empty value`}}},
		// Issue 38, item 6: a selector of 10,000 labels and a 900 KB label
		// value were accepted; the limits are Kubernetes' (pkg/contract/labels.go).
		{"selector of 10,000 labels", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = manyLabels(10_000) })},
			[]wantErr{{"layer2network/a", "spec.nodeSelector.matchLabels", "10,000 labels, over the limit of 64 a node selector may require"}}},
		{"selector of 64 labels", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = manyLabels(64) })}, nil},
		{"selector label value of 900 KB", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("zone", strings.Repeat("a", 900_000)) })},
			[]wantErr{{"layer2network/a", "spec.nodeSelector.matchLabels.zone", "label zone has a value of 900,000 characters, over the limit of 63"}}},
		{"selector label key of 64 characters", []*sluicev1.Intent{table("t", func(s *sluicev1.RoutingTable) { s.NodeSelector = sel(strings.Repeat("k", 64), "a") })},
			[]wantErr{{"routingtable/t", "spec.nodeSelector.matchLabels", "has a name of 64 characters, over the limit of 63"}}},
		{"selector label key with a Kubernetes prefix", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.NodeSelector = sel("topology.kubernetes.io/zone", "eu-1a") })}, nil},
		{"selector label value with a space", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("zone", "zone a") })},
			[]wantErr{{"layer2network/a", "spec.nodeSelector.matchLabels.zone", `label zone has the value "zone a"`}}},
		{"selector label key with an escape sequence", []*sluicev1.Intent{l2("a", func(s *sluicev1.Layer2Network) { s.NodeSelector = sel("zone\x1b[2J", "a") })},
			[]wantErr{{"layer2network/a", "spec.nodeSelector.matchLabels", `label key "zone\x1b[2J" holds the control character U+001B`}}},
		{"name with an escape sequence", []*sluicev1.Intent{l2("evil\x1b]0;pwned\a", nil)},
			[]wantErr{{`layer2network/"evil\x1b]0;pwned\a"`, "name", `the name "evil\x1b]0;pwned\a" holds the control character U+001B at byte 4`}}},
		{"vrf with a C1 control", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Vrf = "a\u009b2J" })},
			[]wantErr{{"vrfroute/r", "spec.vrf", `holds the control character U+009B`}}},

		{"vrf route needs a vrf", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Vrf = "" })},
			[]wantErr{{"vrfroute/r", "spec.vrf", "is required"}}},
		{"vrf route vrf must be a valid name", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Vrf = "-x" })},
			[]wantErr{{"vrfroute/r", "spec.vrf", `"-x" must be lower-case`}}},
		{"sequence missing", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Sequence = 0 })},
			[]wantErr{{"vrfroute/r", "spec.sequence", "sequence is required: 1-65535"}}},
		{"sequence above 65535", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Sequence = 65536 })},
			[]wantErr{{"vrfroute/r", "spec.sequence", "65536 is outside 1-65535"}}},
		{"import cidr invalid", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Import[1].Cidr = "fd00::/129" })},
			[]wantErr{{"vrfroute/r", "spec.import[1].cidr", `"fd00::/129" is not a prefix`}}},
		{"export cidr with host bits", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Export[0].Cidr = "10.0.100.7/24" })},
			[]wantErr{{"vrfroute/r", "spec.export[0].cidr", `"10.0.100.7/24" has host bits set; write 10.0.100.0/24`}}},
		{"ge below prefix length", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Import[0].Ge = 4 })},
			[]wantErr{{"vrfroute/r", "spec.import[0].ge", "4 must be from the prefix length 8 to 32"}}},
		{"le above 32 for IPv4", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Import[0].Le = 33 })},
			[]wantErr{{"vrfroute/r", "spec.import[0].le", "33 must be from the prefix length 8 to 32"}}},
		{"le up to 128 for IPv6", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Import[1].Le = 128 })}, nil},
		{"ge greater than le", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Import[0].Ge, s.Import[0].Le = 24, 16 })},
			[]wantErr{{"vrfroute/r", "spec.import[0].le", "16 is less than ge 24"}}},
		{"ge equal to prefix length", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Import[0].Ge = 8 })}, nil},
		{"community not N:M", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Community = "65000" })},
			[]wantErr{{"vrfroute/r", "spec.community", `"65000" is not a standard community`}}},
		{"community part above 16 bits", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Community = "65536:1" })},
			[]wantErr{{"vrfroute/r", "spec.community", `"65536:1" is not a standard community ASN:VALUE with both parts 0-65535`}}},
		{"community is optional", []*sluicev1.Intent{vrf("r", func(s *sluicev1.VRFRoute) { s.Community = "" })}, nil},

		{"table id missing", []*sluicev1.Intent{table("t", func(s *sluicev1.RoutingTable) { s.TableId = 0 })},
			[]wantErr{{"routingtable/t", "spec.tableId", "is required"}}},
		{"table id 253 is reserved", []*sluicev1.Intent{table("t", func(s *sluicev1.RoutingTable) { s.TableId = 253 })},
			[]wantErr{{"routingtable/t", "spec.tableId", "253 is reserved for the kernel's default table"}}},
		{"table id 254 is reserved", []*sluicev1.Intent{table("t", func(s *sluicev1.RoutingTable) { s.TableId = 254 })},
			[]wantErr{{"routingtable/t", "spec.tableId", "254 is reserved for the kernel's main table"}}},
		{"table id 255 is reserved", []*sluicev1.Intent{table("t", func(s *sluicev1.RoutingTable) { s.TableId = 255 })},
			[]wantErr{{"routingtable/t", "spec.tableId", "255 is reserved for the kernel's local table"}}},
		{"table id at uint32 max", []*sluicev1.Intent{table("t", func(s *sluicev1.RoutingTable) { s.TableId = 4294967295 })}, nil},
		{"several problems in one intent are all reported, sorted by field", []*sluicev1.Intent{
			l2("a", func(s *sluicev1.Layer2Network) { s.Vlan, s.Mtu, s.Vni = 5000, 1, 0 }),
		}, []wantErr{
			{"layer2network/a", "spec.mtu", "1 is outside"},
			{"layer2network/a", "spec.vlan", "5000 is outside"},
			{"layer2network/a", "spec.vni", "required"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, intent.Validate(tt.given), tt.want)
		})
	}
}

func TestValidate_ConflictsOnASharedNode(t *testing.T) {
	withSel := func(in *sluicev1.Intent, s *sluicev1.NodeSelector) *sluicev1.Intent {
		switch x := in.GetSpec().(type) {
		case *sluicev1.Intent_Layer2Network:
			x.Layer2Network.NodeSelector = s
		case *sluicev1.Intent_VrfRoute:
			x.VrfRoute.NodeSelector = s
		case *sluicev1.Intent_RoutingTable:
			x.RoutingTable.NodeSelector = s
		}
		return in
	}
	otherVNI := func(s *sluicev1.Layer2Network) { s.Vni = 20000 }
	otherVLAN := func(s *sluicev1.Layer2Network) { s.Vlan = 200 }
	tests := []struct {
		name  string
		given []*sluicev1.Intent
		want  []wantErr
	}{
		{"same vlan in the same zone", []*sluicev1.Intent{l2("a", nil), l2("b", otherVNI)}, []wantErr{
			{"layer2network/a", "spec.vlan", "VLAN 100 is used by 2 layer2 networks whose node selectors can match the same node: layer2network/a, layer2network/b;"},
		}},
		{"same vlan in different zones", []*sluicev1.Intent{
			l2("a", nil), withSel(l2("b", otherVNI), sel("zone", "zone-b")),
		}, nil},
		{"same vlan, selectors on different labels can share a node", []*sluicev1.Intent{
			l2("a", nil), withSel(l2("b", otherVNI), sel("rack", "rack-1")),
		}, []wantErr{
			{"layer2network/a", "spec.vlan", "VLAN 100 is used by 2 layer2 networks whose node selectors can match the same node: layer2network/a, layer2network/b;"},
		}},
		{"same vlan, one selects every node", []*sluicev1.Intent{
			withSel(l2("a", nil), nil), withSel(l2("b", otherVNI), sel("zone", "zone-c")),
		}, []wantErr{
			{"layer2network/a", "spec.vlan", "VLAN 100 is used by 2 layer2 networks"},
		}},
		{"same vni in the same zone", []*sluicev1.Intent{l2("a", nil), l2("b", otherVLAN)}, []wantErr{
			{"layer2network/a", "spec.vni", "VNI 10100 is used by 2 layer2 networks whose node selectors can match the same node: layer2network/a, layer2network/b;"},
		}},
		{"three networks on one vlan are one error naming all three", []*sluicev1.Intent{
			l2("a", nil), l2("b", otherVNI), l2("c", func(s *sluicev1.Layer2Network) { s.Vni = 30000 }),
		}, []wantErr{
			{"layer2network/a", "spec.vlan", "VLAN 100 is used by 3 layer2 networks whose node selectors can match the same node: layer2network/a, layer2network/b, layer2network/c;"},
		}},
		{"same vrf and sequence", []*sluicev1.Intent{vrf("r1", nil), vrf("r2", nil)}, []wantErr{
			{"vrfroute/r1", "spec.sequence", "sequence 10 in VRF tenant-a is used by 2 VRF routes whose node selectors can match the same node: vrfroute/r1, vrfroute/r2;"},
		}},
		{"same sequence in different vrfs", []*sluicev1.Intent{
			vrf("r1", nil), vrf("r2", func(s *sluicev1.VRFRoute) { s.Vrf = "tenant-b" }),
		}, nil},
		{"same vrf and sequence on disjoint racks", []*sluicev1.Intent{
			withSel(vrf("r1", nil), sel("rack", "rack-1")), withSel(vrf("r2", nil), sel("rack", "rack-2")),
		}, nil},
		{"same table id", []*sluicev1.Intent{table("t1", nil), table("t2", nil)}, []wantErr{
			{"routingtable/t1", "spec.tableId", "table id 100 is used by 2 routing tables whose node selectors can match the same node: routingtable/t1, routingtable/t2;"},
		}},
		{"same table id in disjoint zones", []*sluicev1.Intent{
			withSel(table("t1", nil), sel("zone", "zone-a", "rack", "rack-1")), withSel(table("t2", nil), sel("zone", "zone-b", "rack", "rack-1")),
		}, nil},
		{"1,000 routing tables on one table id are one error naming three and counting the rest",
			tablesSharingOneID(1000), []wantErr{
				{"routingtable/t00000", "spec.tableId", "table id 100 is used by 1,000 routing tables whose node selectors can match the same node: routingtable/t00000, routingtable/t00001, routingtable/t00002 … (+997 more);"},
			}},
		{"one table id on a table per node does not conflict", func() []*sluicev1.Intent {
			ins := tablesSharingOneID(50)
			for i, in := range ins {
				withSel(in, sel("host", fmt.Sprintf("n%d", i)))
			}
			return ins
		}(), nil},
		{"only the tables that can share a node are named", []*sluicev1.Intent{
			withSel(table("a-zone-a", nil), sel("zone", "a")),
			withSel(table("b-zone-b", nil), sel("zone", "b")),
			withSel(table("c-rack-1", nil), sel("rack", "1")), // shares a node with a and b
			withSel(table("d-zone-c-rack-2", nil), sel("zone", "c", "rack", "2")),
			withSel(table("e-zone-d-rack-3", nil), sel("zone", "d", "rack", "3")),
		}, []wantErr{
			{"routingtable/a-zone-a", "spec.tableId", "table id 100 is used by 3 routing tables whose node selectors can match the same node: routingtable/a-zone-a, routingtable/b-zone-b, routingtable/c-rack-1;"},
		}},
		{"identical selectors on one key conflict, distinct ones do not", []*sluicev1.Intent{
			withSel(table("a", nil), sel("zone", "a")),
			withSel(table("b", nil), sel("zone", "b")),
			withSel(table("c", nil), sel("zone", "a")),
		}, []wantErr{
			{"routingtable/a", "spec.tableId", "table id 100 is used by 2 routing tables whose node selectors can match the same node: routingtable/a, routingtable/c;"},
		}},
		{"a vlan and a table id with the same number do not conflict", []*sluicev1.Intent{l2("a", nil), table("t", nil)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, intent.Validate(tt.given), tt.want)
		})
	}
}

// An apply's whole set: a value a stored intent and the batch share is
// reported on the batch's intent (which the applied files declare), not on
// the first by name; Validate alone keeps the first by name.
func TestValidateChanging_ConflictIsOnTheBatchsIntent(t *testing.T) {
	stored, b := l2("a-stored", nil), l2("b", func(s *sluicev1.Layer2Network) { s.Vni = 20000 })
	rule := "VLAN 100 is used by 2 layer2 networks whose node selectors can match the same node: layer2network/a-stored, layer2network/b;"
	checkErrors(t, intent.ValidateChanging([]*sluicev1.Intent{stored, b}, []*sluicev1.Intent{b}), []wantErr{{"layer2network/b", "spec.vlan", rule}})
	checkErrors(t, intent.Validate([]*sluicev1.Intent{stored, b}), []wantErr{{"layer2network/a-stored", "spec.vlan", rule}})
	// Two of the batch claim it too: the first of them by name.
	c := l2("c", func(s *sluicev1.Layer2Network) { s.Vni = 30000 })
	checkErrors(t, intent.ValidateChanging([]*sluicev1.Intent{stored, b, c}, []*sluicev1.Intent{c, b}), []wantErr{{"layer2network/b", "spec.vlan",
		"VLAN 100 is used by 3 layer2 networks whose node selectors can match the same node: layer2network/a-stored, layer2network/b, layer2network/c;"}})
}

func TestValidateStrategy(t *testing.T) {
	tests := []struct {
		given   string
		wantErr bool
	}{
		{"", false}, {"1", false}, {"25", false}, {"1%", false}, {"100%", false},
		{"0", true}, {"-1", true}, {"abc", true}, {"0%", true}, {"101%", true}, {"%", true}, {"5.5", true}, {"10 %", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("maxParallel %q", tt.given), func(t *testing.T) {
			got := intent.ValidateStrategy(&sluicev1.Strategy{MaxParallel: tt.given})
			if !tt.wantErr {
				checkErrors(t, got, nil)
				return
			}
			checkErrors(t, got, []wantErr{{"", "strategy.maxParallel", fmt.Sprintf("%q is not a", tt.given)}})
		})
	}
}

func TestCanShareNode(t *testing.T) {
	tests := []struct {
		name string
		a, b *sluicev1.NodeSelector
		want bool
	}{
		{"both empty", nil, nil, true},
		{"one empty", sel("zone", "a"), nil, true},
		{"same label", sel("zone", "a"), sel("zone", "a"), true},
		{"different keys", sel("zone", "a"), sel("rack", "1"), true},
		{"different values", sel("zone", "a"), sel("zone", "b"), false},
		{"one key differs among many", sel("zone", "a", "rack", "1", "role", "leaf"), sel("zone", "a", "rack", "2"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := intent.CanShareNode(tt.a, tt.b); got != tt.want {
				t.Errorf("CanShareNode(a, b) = %t, want %t", got, tt.want)
			}
			if got := intent.CanShareNode(tt.b, tt.a); got != tt.want {
				t.Errorf("CanShareNode(b, a) = %t, want %t", got, tt.want)
			}
		})
	}
}

// manyLabels is a selector of n valid labels.
func manyLabels(n int) *sluicev1.NodeSelector {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("l%05d", i)] = "v"
	}
	return &sluicev1.NodeSelector{MatchLabels: m}
}

// Issue 38, item 6: whatever a set holds, the lines the CLI prints for its
// problems carry no control character (a crafted name retitled the
// terminal) and no value longer than a line.
func TestFormatFieldError_IsPrintableAndShort(t *testing.T) {
	errs := intent.Validate([]*sluicev1.Intent{
		l2("evil\x1b]0;pwned\a", nil),
		l2("evil\x1b]0;pwned\a", nil),
		table("x\u202egnp.exe", func(s *sluicev1.RoutingTable) { s.NodeSelector = sel("zone", strings.Repeat("\x1b", 900_000)) }),
		{Name: "no-kind\r\x1b[2K"},
	})
	if len(errs) == 0 {
		t.Fatal("no problems found")
	}
	for _, fe := range errs {
		line := intent.FormatFieldError(fe)
		if !contract.Printable(line) || len(line) > 500 {
			t.Errorf("printed as %d bytes, printable %v: %.600q", len(line), contract.Printable(line), line)
		}
	}
	// A problem made outside Validate (a registry document's origin) is escaped too.
	if got := intent.FormatFieldError(&sluicev1.FieldError{Intent: "redis key a\x1b[31m", Rule: "r"}); got != `redis key a\x1b[31m: r` {
		t.Errorf("FormatFieldError = %q", got)
	}
}
