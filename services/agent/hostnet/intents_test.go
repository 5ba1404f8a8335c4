package hostnet_test

import (
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// config is a NodeConfig of intents.
func config(intents ...*sluicev1.Intent) *sluicev1.NodeConfig {
	return &sluicev1.NodeConfig{Intents: intents}
}

// desired wraps intents in a DesiredConfig.
func desired(intents ...*sluicev1.Intent) *sluicev1.DesiredConfig {
	return &sluicev1.DesiredConfig{Node: "n", Config: config(intents...)}
}

// l2 is a Layer2Network intent.
func l2(name string, vlan, vni, mtu uint32, vrf string, gateways ...string) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
		Vlan: vlan, Vni: vni, Mtu: mtu, Vrf: vrf, AnycastGateways: gateways,
	}}}
}

// table is a RoutingTable intent.
func table(name string, id uint32) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: id}}}
}

// route is a VRFRoute intent.
func route(name, vrf string, seq uint32, community string, imports, exports []*sluicev1.PrefixItem) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{
		Vrf: vrf, Sequence: seq, Community: community, Import: imports, Export: exports,
	}}}
}

// prefix is a PrefixItem.
func prefix(cidr string, ge, le uint32) *sluicev1.PrefixItem {
	return &sluicev1.PrefixItem{Cidr: cidr, Ge: ge, Le: le}
}
