package hostnet

import (
	"cmp"
	"net/netip"
	"slices"
)

// Desired is a set of owned links with everything the applier manages on
// them: what Render wants on a host, or what the applier read from it.
// Links are sorted by name, and each link's addresses and FDB entries are
// sorted too, so two equal states compare equal with reflect.DeepEqual.
type Desired struct {
	Links []Link
	// Routing is the routing-daemon document; Diff ignores it and it is
	// empty in a state read from the host.
	Routing RoutingConfig
}

// Kind is the kind of a link, as the kernel names it.
type Kind string

// The kinds of owned links.
const (
	KindVRF     Kind = "vrf"
	KindBridge  Kind = "bridge"
	KindMacvlan Kind = "macvlan" // the anycast gateway on a bridge
	KindVXLAN   Kind = "vxlan"
)

// Link is one owned link.
//
// The fields up to Table are fixed when the kernel creates the link: a
// change to any of them means delete and create. The rest can change in
// place.
type Link struct {
	Name string
	Kind Kind

	// VXLAN devices only.
	VNI      uint32
	Port     uint16
	Local    netip.Addr // local address; invalid = none
	Dev      string     // source device; "" = none
	Learning bool
	// Macvlan devices only: the device it sits on (its bridge).
	Parent string
	// VRF devices only: the kernel routing table.
	Table uint32

	MTU int // 0 = not managed
	// HardwareAddr is the link's Ethernet address in canonical form; "" =
	// not managed (the kernel's).
	HardwareAddr string
	// ARPStrict means arp_ignore=1 and arp_announce=2 on the link: it
	// answers ARP only for its own addresses and asks with them. When false
	// the link keeps whatever the host's sysctl defaults gave it.
	ARPStrict bool
	Master    string // the link it is enslaved to; "" = none
	Up        bool
	Addrs     []Addr
	FDB       []FDBEntry
}

// sameFixed reports whether a and b agree on everything the kernel fixes at
// creation.
func sameFixed(a, b Link) bool {
	return a.Kind == b.Kind && a.VNI == b.VNI && a.Port == b.Port && a.Local == b.Local && a.Dev == b.Dev &&
		a.Learning == b.Learning && a.Parent == b.Parent && a.Table == b.Table
}

// Addr is an address on a link.
type Addr struct {
	Prefix netip.Prefix // the address and its prefix length, e.g. 10.0.0.1/24
	// NoPrefixRoute: the kernel adds no route for the prefix. An anycast
	// gateway has it when the bridge's node address already routes its
	// prefix, so traffic to the network leaves from the node's own MAC.
	NoPrefixRoute bool
}

func (a Addr) String() string {
	if a.NoPrefixRoute {
		return a.Prefix.String() + " noprefixroute"
	}
	return a.Prefix.String()
}

func compareAddr(a, b Addr) int {
	return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()),
		compareBool(a.NoPrefixRoute, b.NoPrefixRoute))
}

// FDBEntry is a forwarding entry of a link: on a VXLAN device, where frames
// to MAC go (Dst, a remote VTEP; the all-zeros MAC floods); on a bridge, a
// MAC the bridge delivers to itself (Dst invalid).
type FDBEntry struct {
	MAC string // canonical form
	Dst netip.Addr
}

func (e FDBEntry) String() string {
	if e.Dst.IsValid() {
		return e.MAC + " dst " + e.Dst.String()
	}
	return e.MAC + " local"
}

func compareFDB(a, b FDBEntry) int {
	return cmp.Or(cmp.Compare(a.MAC, b.MAC), a.Dst.Compare(b.Dst))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// normalize sorts d's links, addresses and FDB entries and drops duplicates,
// so that equal states are equal values.
func (d *Desired) normalize() {
	for i := range d.Links {
		l := &d.Links[i]
		slices.SortFunc(l.Addrs, compareAddr)
		l.Addrs = slices.Compact(l.Addrs)
		slices.SortFunc(l.FDB, compareFDB)
		l.FDB = slices.Compact(l.FDB)
		if len(l.Addrs) == 0 {
			l.Addrs = nil
		}
		if len(l.FDB) == 0 {
			l.FDB = nil
		}
	}
	slices.SortFunc(d.Links, func(a, b Link) int { return cmp.Compare(a.Name, b.Name) })
}
