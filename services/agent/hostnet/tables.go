package hostnet

import (
	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// VRFTables returns the kernel table of every VRF cfg names (by a layer2
// network or a VRF route): the table id of the RoutingTable intent of the
// same name plus tableOffset, else vrfTableBase (0 = DefaultVRFTableBase) +
// FNV-32a(name) % 100000. It is the one home of that rule: Render binds
// each VRF device to this table, and the FRR applier and checks look a
// VRF's routes up in it. An error matches ErrInvalidConfig.
func VRFTables(cfg *sluicev1.NodeConfig, tableOffset, vrfTableBase uint32) (map[string]uint32, error) {
	if vrfTableBase == 0 {
		vrfTableBase = DefaultVRFTableBase
	}
	var l2s, routes, tables []*sluicev1.Intent
	for _, in := range cfg.GetIntents() {
		switch {
		case in.GetLayer2Network() != nil:
			l2s = append(l2s, in)
		case in.GetVrfRoute() != nil:
			routes = append(routes, in)
		case in.GetRoutingTable() != nil:
			tables = append(tables, in)
		}
	}
	tableOf, err := routingTables(tables, tableOffset)
	if err != nil {
		return nil, err
	}
	out := map[string]uint32{}
	for vrf := range vrfNames(l2s, routes) {
		out[vrf] = vrfTable(vrf, tableOf, vrfTableBase)
	}
	return out, nil
}

// routingTables returns the kernel table of each RoutingTable intent, by
// intent name: its table id plus offset.
func routingTables(tables []*sluicev1.Intent, offset uint32) (map[string]uint32, error) {
	tableOf := map[string]uint32{}
	for _, in := range tables {
		id := in.GetRoutingTable().GetTableId()
		t := uint64(id) + uint64(offset)
		switch {
		case id == 0:
			return nil, invalid("routing table %s has no table id", in.GetName())
		case t > 1<<32-1 || (t >= 253 && t <= 255):
			return nil, invalid("routing table %s: table id %d + tableOffset %d = %d is not a usable kernel table (1-4294967295 except 253-255)",
				in.GetName(), id, offset, t)
		}
		tableOf[in.GetName()] = uint32(t)
	}
	return tableOf, nil
}

// vrfNames returns the VRFs the layer2 networks and VRF routes name.
func vrfNames(l2s, routes []*sluicev1.Intent) map[string]bool {
	names := map[string]bool{}
	for _, in := range l2s {
		if v := in.GetLayer2Network().GetVrf(); v != "" {
			names[v] = true
		}
	}
	for _, in := range routes {
		if v := in.GetVrfRoute().GetVrf(); v != "" {
			names[v] = true
		}
	}
	return names
}

// vrfTable is the kernel table of VRF vrf: its routing table's, else base +
// FNV-32a(vrf) % VRFTableSpan.
func vrfTable(vrf string, tableOf map[string]uint32, base uint32) uint32 {
	if t, ok := tableOf[vrf]; ok {
		return t
	}
	return base + contract.VRFTableSlot(vrf)
}
