package verify

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// valuesShown is how many distinct values a mismatch names.
const valuesShown = 3

// l2 is a layer2 network intent with its spec at hand.
type l2 struct {
	in   *sluicev1.Intent
	spec *sluicev1.Layer2Network
}

// layer2 checks that a VNI is one network across the fabric (one VLAN, MTU,
// set of gateways and VRF wherever it is carried), that a VLAN carries one
// VNI, and that an anycast gateway address is one network's in its VRF.
// Per node, intent.Validate already refuses a VLAN or VNI twice; these are
// the same values on nodes no one selector shares.
func (v *verifier) layer2(ins []*sluicev1.Intent) {
	var nets []l2
	for _, in := range ins {
		if s := in.GetLayer2Network(); s != nil {
			nets = append(nets, l2{in, s})
		}
	}
	byVNI := groupBy(nets, func(n l2) string { return key(n.spec.GetVni()) })
	for _, g := range byVNI {
		if len(g) < 2 || g[0].spec.GetVni() == 0 {
			continue
		}
		vni := g[0].spec.GetVni()
		v.mismatch(RuleVNIVLAN, vni, "VLANs", "vlan", g, func(n l2) string { return strconv.FormatUint(uint64(n.spec.GetVlan()), 10) })
		v.mismatch(RuleVNIMTU, vni, "MTUs", "mtu", g, func(n l2) string {
			mtu := n.spec.GetMtu()
			if mtu == 0 {
				mtu = intent.DefaultMTU
			}
			return strconv.FormatUint(uint64(mtu), 10)
		})
		v.mismatch(RuleVNIGateways, vni, "sets of anycast gateways", "anycastGateways", g, func(n l2) string { return gatewaySet(n.spec) })
		v.mismatch(RuleVNIVRF, vni, "VRFs", "vrf", g, func(n l2) string { return orNone(n.spec.GetVrf()) })
	}

	for _, g := range groupBy(nets, func(n l2) string { return key(n.spec.GetVlan()) }) {
		if g[0].spec.GetVlan() == 0 {
			continue
		}
		vnis := groupBy(g, func(n l2) string { return key(n.spec.GetVni()) })
		if len(vnis) < 2 {
			continue
		}
		v.add(RuleVLANVNIs, intentsOf(g), fmt.Sprintf("VLAN %d carries %d VNIs on different nodes: %s", g[0].spec.GetVlan(), len(vnis),
			describeValues(vnis, func(n l2) string { return "VNI " + strconv.FormatUint(uint64(n.spec.GetVni()), 10) })),
			"a switch port trunking this VLAN to nodes of both groups joins two VXLAN segments; give each VNI its own VLAN")
	}

	// An anycast gateway address is one network's within its VRF. The same
	// address in two VRFs is two routing domains (tenants may reuse
	// addresses), so the key is the VRF and the address.
	type gw struct {
		n    l2
		vrf  string
		addr netip.Addr
	}
	var gws []gw
	for _, n := range nets {
		for _, s := range n.spec.GetAnycastGateways() {
			if p, err := netip.ParsePrefix(s); err == nil {
				gws = append(gws, gw{n, n.spec.GetVrf(), p.Addr()})
			}
		}
	}
	for _, g := range groupBy(gws, func(x gw) string { return x.vrf + "\x00" + x.addr.String() }) {
		nets := make([]l2, len(g))
		for i, x := range g {
			nets[i] = x.n
		}
		vnis := groupBy(nets, func(n l2) string { return key(n.spec.GetVni()) })
		if len(vnis) < 2 {
			continue
		}
		v.add(RuleGatewayShared, intentsOf(nets), fmt.Sprintf("anycast gateway %s in VRF %s is on %d layer2 networks: %s",
			g[0].addr, orNone(g[0].vrf), len(vnis), describeValues(vnis, func(n l2) string { return "VNI " + strconv.FormatUint(uint64(n.spec.GetVni()), 10) })),
			"an address answers for one network: give each network its own gateway address, or make them one network (one VNI)")
	}
}

// mismatch reports a VNI whose networks disagree on one attribute.
func (v *verifier) mismatch(rule string, vni uint32, what, field string, g []l2, value func(l2) string) {
	vals := groupBy(g, value)
	if len(vals) < 2 {
		return
	}
	v.add(rule, intentsOf(g), fmt.Sprintf("VNI %d is one network across the fabric but its layer2 networks give it %d %s: %s",
		vni, len(vals), what, describeValues(vals, value)),
		fmt.Sprintf("give every layer2 network with VNI %d the same spec.%s, or give the other network a VNI of its own", vni, field))
}

// describeValues names each group's value and its first intent: "100
// (layer2network/a), 101 (layer2network/b and 2 more)".
func describeValues(groups [][]l2, value func(l2) string) string {
	var parts []string
	for _, g := range groups[:min(len(groups), valuesShown)] {
		ids := idsOf(intentsOf(g))
		who := ids[0]
		if len(ids) > 1 {
			who += fmt.Sprintf(" and %d more", len(ids)-1)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", value(g[0]), who))
	}
	if n := len(groups) - valuesShown; n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(parts, ", ")
}

// gatewaySet is a network's gateways, normalized and sorted: "[10.0.0.1/24 fd00::1/64]".
func gatewaySet(s *sluicev1.Layer2Network) string {
	var out []string
	for _, g := range s.GetAnycastGateways() {
		if p, err := netip.ParsePrefix(g); err == nil {
			out = append(out, p.String())
		} else {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return "[" + strings.Join(slices.Compact(out), " ") + "]"
}

func intentsOf(g []l2) []*sluicev1.Intent {
	out := make([]*sluicev1.Intent, len(g))
	for i, n := range g {
		out[i] = n.in
	}
	return out
}

// key is a number as a sortable string (zero-padded), for groupBy.
func key(n uint32) string { return fmt.Sprintf("%010d", n) }

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
