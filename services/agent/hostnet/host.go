package hostnet

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
)

// Defaults of the Host fields left zero.
const (
	DefaultVXLANPort    = 4789
	DefaultVRFTableBase = 10000
	DefaultAnycastMAC   = "02:53:4c:00:00:01"
)

// VRFTableSpan is how many tables VRFTableBase + hash % VRFTableSpan spreads
// the VRFs without a routing table of their own over (contract.VRFTableSlot,
// which the fleet verifier reads too).
const VRFTableSpan = contract.VRFTableSpan

// VRF modes (Host.VRFs).
const (
	// VRFsKernel puts each VRF in a VRF device (needs CONFIG_NET_VRF).
	VRFsKernel = "kernel"
	// VRFsOff creates no VRF devices: bridges and gateways stay in the main
	// table. There is no tenant isolation in this mode.
	VRFsOff = "off"
)

// Host holds the parameters of one host that a NodeConfig does not carry:
// how its VXLAN devices reach the fabric and how VRFs are built. It comes
// from the agent's config file; the json names are the names there.
type Host struct {
	// Uplink is the interface the VXLAN devices send from (their source
	// device). One of Uplink and VTEPAddress is required.
	Uplink string `json:"uplink,omitempty"`
	// VTEPAddress is the VXLAN devices' local address.
	VTEPAddress netip.Addr `json:"vtepAddress,omitzero"`
	// VXLANPort is the VXLAN UDP port (0 = DefaultVXLANPort).
	VXLANPort uint16 `json:"vxlanPort,omitempty"`
	// TableOffset is added to a RoutingTable intent's table id to give the
	// kernel table.
	TableOffset uint32 `json:"tableOffset,omitempty"`
	// VRFTableBase is the first kernel table of VRFs that no RoutingTable
	// intent names: such a VRF gets VRFTableBase + FNV-32a(name) % 100000
	// (0 = DefaultVRFTableBase).
	VRFTableBase uint32 `json:"vrfTableBase,omitempty"`
	// AnycastMAC is the hardware address of every anycast gateway device. It
	// must be the same on all nodes, unicast and locally administered
	// ("" = DefaultAnycastMAC).
	AnycastMAC string `json:"anycastMAC,omitempty"`
	// FloodPeers are the other nodes' VTEP addresses for static head-end
	// replication: each VXLAN device gets an all-zeros FDB entry per peer,
	// so broadcast, unknown unicast and multicast reach every peer. For
	// fabrics without EVPN. With EVPN leave it empty: the routing daemon
	// programs the FDB and the applier leaves the VXLAN FDB alone. The
	// node's own VTEPAddress may be listed (it is skipped), so every node can
	// share one list; a node with only an uplink must leave its own address
	// out.
	FloodPeers []netip.Addr `json:"floodPeers,omitempty"`
	// NodeAddresses are this node's own addresses, by VLAN: a unique address
	// in that layer2 network, put on its bridge. Any probe across the overlay
	// needs one as its source: a probe sent from an anycast gateway address
	// never gets its reply, because the peer has that address (and the
	// anycast MAC) itself, so its reply stays on the peer.
	NodeAddresses map[uint32]netip.Prefix `json:"nodeAddresses,omitempty"`
	// VRFs is VRFsKernel ("" too) or VRFsOff.
	VRFs string `json:"vrfs,omitempty"`
	// RoutingDaemonFile is where the routing-daemon document (see
	// RoutingConfig) is written, atomically, after each apply. "" = nowhere.
	RoutingDaemonFile string `json:"routingDaemonFile,omitempty"`
}

// Validate reports every field that is wrong, each error naming the field
// by its json name. All errors match ErrInvalidHost.
func (h Host) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidHost, field, fmt.Sprintf(format, args...)))
	}
	switch {
	case h.Uplink == "" && !h.VTEPAddress.IsValid():
		bad("uplink", "one of uplink and vtepAddress is required: the interface or address the VXLAN devices send from")
	case h.Uplink != "" && (len(h.Uplink) > MaxNameLen || strings.ContainsAny(h.Uplink, "/ \t\n")):
		bad("uplink", "%q is not an interface name (at most %d characters, no '/' or spaces)", h.Uplink, MaxNameLen)
	}
	if a := h.VTEPAddress; a.IsValid() && !usableUnicast(a) {
		bad("vtepAddress", "%s is not a unicast address", a)
	}
	if b := h.VRFTableBase; b != 0 && (b < 256 || uint64(b)+VRFTableSpan-1 > math.MaxUint32) {
		bad("vrfTableBase", "%d is outside 256-%d: VRF tables run from it to %d above it and must miss the kernel's tables 253-255", b, math.MaxUint32-VRFTableSpan+1, VRFTableSpan-1)
	}
	if h.AnycastMAC != "" {
		if _, err := parseAnycastMAC(h.AnycastMAC); err != nil {
			bad("anycastMAC", "%v", err)
		}
	}
	seen := map[netip.Addr]bool{}
	for i, p := range h.FloodPeers {
		switch {
		case !usableUnicast(p):
			bad(fmt.Sprintf("floodPeers[%d]", i), "%s is not a unicast address", p)
		case seen[p]:
			bad(fmt.Sprintf("floodPeers[%d]", i), "%s is listed twice", p)
		case h.VTEPAddress.IsValid() && p.Is4() != h.VTEPAddress.Is4():
			bad(fmt.Sprintf("floodPeers[%d]", i), "%s is not of the address family of vtepAddress %s", p, h.VTEPAddress)
		case i > 0 && p.Is4() != h.FloodPeers[0].Is4():
			bad(fmt.Sprintf("floodPeers[%d]", i), "%s is not of the address family of floodPeers[0] %s", p, h.FloodPeers[0])
		}
		seen[p] = true
	}
	for _, vlan := range slices.Sorted(maps.Keys(h.NodeAddresses)) {
		p := h.NodeAddresses[vlan]
		field := fmt.Sprintf("nodeAddresses[%d]", vlan)
		switch {
		case vlan < 1 || vlan > 4094:
			bad(field, "VLAN %d is outside 1-4094", vlan)
		case !p.IsValid() || !usableUnicast(p.Addr()):
			bad(field, "%s is not an address in CIDR form like 10.0.0.11/24", p)
		case p.Addr().Is4() && p.Bits() < 31 && p.Addr() == p.Masked().Addr():
			bad(field, "%s is the network address of %s; give the node's own address", p, p.Masked())
		}
	}
	if h.VRFs != "" && h.VRFs != VRFsKernel && h.VRFs != VRFsOff {
		bad("vrfs", "%q is not %q or %q", h.VRFs, VRFsKernel, VRFsOff)
	}
	if f := h.RoutingDaemonFile; f != "" && (!filepath.IsAbs(f) || strings.HasSuffix(f, "/")) {
		bad("routingDaemonFile", "%q is not an absolute file path", f)
	}
	return errors.Join(errs...)
}

// withDefaults returns h with its zero fields set to their defaults.
func (h Host) withDefaults() Host {
	if h.VXLANPort == 0 {
		h.VXLANPort = DefaultVXLANPort
	}
	if h.VRFTableBase == 0 {
		h.VRFTableBase = DefaultVRFTableBase
	}
	if h.AnycastMAC == "" {
		h.AnycastMAC = DefaultAnycastMAC
	}
	if h.VRFs == "" {
		h.VRFs = VRFsKernel
	}
	return h
}

// parseAnycastMAC parses s as a unicast, locally administered Ethernet
// address and returns it in canonical form.
func parseAnycastMAC(s string) (string, error) {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil || len(mac) != 6:
		return "", fmt.Errorf("%q is not an Ethernet address like %s", s, DefaultAnycastMAC)
	case mac[0]&0x01 != 0:
		return "", fmt.Errorf("%s is a multicast address; it must be unicast (the first octet even), e.g. %s", mac, DefaultAnycastMAC)
	case mac[0]&0x02 == 0:
		return "", fmt.Errorf("%s is not locally administered (bit 0x02 of the first octet), e.g. %s", mac, DefaultAnycastMAC)
	}
	return mac.String(), nil
}

// usableUnicast reports whether a is an address a device can have and
// send from.
func usableUnicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback() && a.Zone() == "" &&
		!(a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}))
}
