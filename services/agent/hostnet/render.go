package hostnet

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Layer2Network defaults and ranges Render relies on.
const (
	defaultMTU = 1500
	maxVLAN    = 4094
	maxVNI     = 1<<24 - 1
	mainTable  = 254
)

// floodMAC is the destination of the FDB entries that flood a VXLAN
// segment's broadcast, unknown unicast and multicast to a peer.
const floodMAC = "00:00:00:00:00:00"

// Render returns the owned objects cfg means on a host with parameters h,
// and the routing-daemon document. It is a pure function of its inputs:
// the order of the intents does not matter.
func Render(cfg *sluicev1.NodeConfig, h Host) (Desired, error) {
	if err := h.Validate(); err != nil {
		return Desired{}, err
	}
	h = h.withDefaults()
	r := renderer{h: h, kernelVRFs: h.VRFs == VRFsKernel}
	r.mac, _ = parseAnycastMAC(h.AnycastMAC) // valid: checked by Validate

	var l2s []*sluicev1.Intent
	var routes []*sluicev1.Intent
	var tables []*sluicev1.Intent
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
	for _, list := range [][]*sluicev1.Intent{l2s, routes, tables} {
		slices.SortFunc(list, func(a, b *sluicev1.Intent) int { return cmp.Compare(a.GetName(), b.GetName()) })
	}

	if err := r.vrfs(l2s, routes, tables); err != nil {
		return Desired{}, err
	}
	if err := r.layer2s(l2s); err != nil {
		return Desired{}, err
	}
	routing, err := r.routing(routes)
	if err != nil {
		return Desired{}, err
	}
	d := Desired{Links: r.links, Routing: routing}
	d.normalize()
	return d, nil
}

// renderer holds what Render builds up.
type renderer struct {
	h          Host
	kernelVRFs bool
	mac        string

	links []Link
	// vrfTables is the kernel table of each VRF named in the config.
	vrfTables map[string]uint32
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// vrfs decides the table of every VRF the config names and, with kernel
// VRFs, renders the VRF devices: one per VRF and one per routing table that
// no VRF takes.
func (r *renderer) vrfs(l2s, routes, tables []*sluicev1.Intent) error {
	tableOf, err := routingTables(tables, r.h.TableOffset)
	if err != nil {
		return err
	}
	names := vrfNames(l2s, routes)
	r.vrfTables = map[string]uint32{}
	for vrf := range names {
		r.vrfTables[vrf] = vrfTable(vrf, tableOf, r.h.VRFTableBase)
	}
	if !r.kernelVRFs {
		return nil
	}

	// Every VRF device needs a table of its own, and a device name of its own.
	owner := map[uint32]string{}
	devOwner := map[string]string{}
	claim := func(table uint32, dev, who string) error {
		if other, ok := owner[table]; ok {
			return invalid("%s and %s both want kernel table %d; give one of them another table (routingTable intent, tableOffset or vrfTableBase)", other, who, table)
		}
		if other, ok := devOwner[dev]; ok {
			return invalid("%s and %s both map to the device name %s; rename one", other, who, dev)
		}
		owner[table], devOwner[dev] = who, who
		return nil
	}
	for _, vrf := range slices.Sorted(maps.Keys(names)) {
		t := r.vrfTables[vrf]
		if err := claim(t, VRFName(vrf), "VRF "+vrf); err != nil {
			return err
		}
		r.links = append(r.links, Link{Name: VRFName(vrf), Kind: KindVRF, Table: t, Up: true})
	}
	for _, in := range tables {
		if names[in.GetName()] {
			continue // the VRF of that name is bound to this table
		}
		name := TableName(in.GetRoutingTable().GetTableId())
		t := tableOf[in.GetName()]
		if err := claim(t, name, "routing table "+in.GetName()); err != nil {
			return err
		}
		r.links = append(r.links, Link{Name: name, Kind: KindVRF, Table: t, Up: true})
	}
	return nil
}

// layer2s renders the VXLAN device, bridge and anycast gateway of each
// layer2 network.
func (r *renderer) layer2s(l2s []*sluicev1.Intent) error {
	byVLAN := map[uint32]string{}
	byVNI := map[uint32]string{}
	for _, in := range l2s {
		l2 := in.GetLayer2Network()
		name, vlan, vni := in.GetName(), l2.GetVlan(), l2.GetVni()
		switch {
		case vlan < 1 || vlan > maxVLAN:
			return invalid("layer2 network %s: VLAN %d is outside 1-%d", name, vlan, maxVLAN)
		case vni < 1 || vni > maxVNI:
			return invalid("layer2 network %s: VNI %d is outside 1-%d", name, vni, maxVNI)
		case byVLAN[vlan] != "":
			return invalid("layer2 networks %s and %s both use VLAN %d", byVLAN[vlan], name, vlan)
		case byVNI[vni] != "":
			return invalid("layer2 networks %s and %s both use VNI %d", byVNI[vni], name, vni)
		}
		byVLAN[vlan], byVNI[vni] = name, name

		mtu := int(l2.GetMtu())
		if mtu == 0 {
			mtu = defaultMTU
		}
		master := ""
		if l2.GetVrf() != "" && r.kernelVRFs {
			master = VRFName(l2.GetVrf())
		}
		node, hasNode := r.h.NodeAddresses[vlan]

		var gateways []Addr
		for _, s := range l2.GetAnycastGateways() {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return invalid("layer2 network %s: anycast gateway %q is not an address in CIDR form like 10.0.0.1/24", name, s)
			}
			if hasNode && p.Addr() == node.Addr() {
				return invalid("layer2 network %s: nodeAddresses[%d] %s is its anycast gateway; a node address must be this node's own", name, vlan, node)
			}
			// When the node address routes the gateway's prefix, the
			// gateway adds no route of its own: traffic into the network
			// then leaves the bridge with the node's own MAC and address,
			// so replies come back to this node, not to the anycast MAC
			// that every node answers for.
			covered := hasNode && node.Addr().Is4() == p.Addr().Is4() && node.Bits() <= p.Bits() && node.Masked().Contains(p.Addr())
			gateways = append(gateways, Addr{Prefix: p, NoPrefixRoute: covered})
		}

		bridge := Link{Name: BridgeName(vlan), Kind: KindBridge, MTU: mtu, ARPStrict: true, Master: master, Up: true}
		if hasNode {
			bridge.Addrs = []Addr{{Prefix: node}}
		}
		if len(gateways) > 0 {
			// The bridge delivers frames to the anycast MAC to itself (and so
			// to the gateway on it) and never learns it from the overlay,
			// where every other node sends from it too.
			bridge.FDB = []FDBEntry{{MAC: r.mac}}
			r.links = append(r.links, Link{
				Name: GatewayName(vlan), Kind: KindMacvlan, Parent: bridge.Name, MTU: mtu,
				HardwareAddr: r.mac, ARPStrict: true, Master: master, Up: true, Addrs: gateways,
			})
		}
		r.links = append(r.links, bridge)

		vxlan := Link{
			Name: VXLANName(vlan), Kind: KindVXLAN, VNI: vni, Port: r.h.VXLANPort, Local: r.h.VTEPAddress, Dev: r.h.Uplink,
			MTU: mtu, Master: bridge.Name, Up: true,
		}
		for _, peer := range r.h.FloodPeers {
			if peer != r.h.VTEPAddress {
				vxlan.FDB = append(vxlan.FDB, FDBEntry{MAC: floodMAC, Dst: peer})
			}
		}
		r.links = append(r.links, vxlan)
	}
	return nil
}
