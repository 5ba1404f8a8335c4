package hostnet_test

import (
	"errors"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// VRFTables is the one home of the VRF table rule: the tables it gives are
// those Render binds the VRF devices to, for a routing table intent, a
// hashed table and a table offset alike.
func TestVRFTables_AreTheTablesRenderBinds(t *testing.T) {
	cfg := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{
		{Name: "l2", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{Vlan: 10, Vni: 100, Vrf: "red"}}},
		{Name: "leak", Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{Vrf: "blue", Sequence: 1}}},
		{Name: "blue", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 42}}},
	}}
	for _, h := range []hostnet.Host{{Uplink: "eth0"}, {Uplink: "eth0", TableOffset: 1000, VRFTableBase: 20000}} {
		d, err := hostnet.Render(cfg, h)
		if err != nil {
			t.Fatal(err)
		}
		bound := map[string]uint32{}
		for _, l := range d.Links {
			if l.Kind == hostnet.KindVRF {
				bound[l.Name] = l.Table
			}
		}
		got, err := hostnet.VRFTables(cfg, h.TableOffset, h.VRFTableBase)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got["red"] != bound["vrf-red"] || got["blue"] != bound["vrf-blue"] || got["blue"] != 42+h.TableOffset {
			t.Errorf("host %+v: VRFTables = %v; Render bound %v", h, got, bound)
		}
	}
}

func TestVRFTables_UnusableRoutingTable_IsInvalidConfig(t *testing.T) {
	cfg := &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{
		{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 250}}},
	}}
	if _, err := hostnet.VRFTables(cfg, 4, 0); !errors.Is(err, hostnet.ErrInvalidConfig) {
		t.Fatalf("err = %v; want ErrInvalidConfig (250 + 4 = 254 is the main table)", err)
	}
}
