package frr

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// BGPSummary is the BGP neighbours of every VRF, as "show bgp vrf all
// summary json" lists them: every neighbour configured (an Idle one too),
// each once per VRF, its address families merged.
type BGPSummary struct {
	// VRFs are the VRFs with a BGP instance ("router bgp … [vrf X]"),
	// sorted; "default" is the default VRF.
	VRFs []string
	// Neighbors are sorted by VRF, then by peer.
	Neighbors []BGPNeighbor
}

// BGPNeighbor is one BGP neighbour of one VRF.
type BGPNeighbor struct {
	VRF      string // "default" for the default VRF
	Peer     string // its address, or its interface for an unnumbered one
	RemoteAS string // "65002"; "" if FRR gives none
	// State is FRR's: "Established", "Active", "Connect", "Idle",
	// "Idle (Admin)" (shut down by config), "Idle (PfxCt)" (maximum-prefix
	// hit), …
	State string
	// Received is the prefixes received (pfxRcd), summed over Families.
	Received int
	// Families are the address families the neighbour is in
	// ("ipv4Unicast", "ipv6Unicast", "l2VpnEvpn"), sorted.
	Families []string
	Uptime   string // FRR's peerUptime: "00:01:02", "never"
}

// Established reports whether the session is up.
func (n BGPNeighbor) Established() bool { return n.State == "Established" }

// AdminDown reports whether the config shuts the neighbour down
// ("neighbor X shutdown"): it is down on purpose.
func (n BGPNeighbor) AdminDown() bool { return strings.HasPrefix(n.State, "Idle (Admin)") }

// String is one line of evidence: "vrf default: 192.0.2.2 (AS 65002)
// Established, 1 prefix received (ipv4Unicast), up 00:00:03".
func (n BGPNeighbor) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "vrf %s: %s", n.VRF, n.Peer)
	if n.RemoteAS != "" {
		fmt.Fprintf(&b, " (AS %s)", n.RemoteAS)
	}
	fmt.Fprintf(&b, " %s", n.State)
	if n.Established() {
		fmt.Fprintf(&b, ", %s received (%s), up %s", plural(n.Received, "prefix", "prefixes"), strings.Join(n.Families, ", "), n.Uptime)
	} else if n.Uptime == "never" {
		b.WriteString(", never established")
	}
	return b.String()
}

// summaryPeer is a neighbour in one address family of "show bgp vrf all
// summary json".
type summaryPeer struct {
	RemoteAS json.RawMessage `json:"remoteAs"`
	State    string          `json:"state"`
	PfxRcd   int             `json:"pfxRcd"`
	Uptime   string          `json:"peerUptime"`
}

// ParseBGPSummary reads FRR 8.4's "show bgp vrf all summary json":
// {vrf: {addressFamily: {"peers": {peer: {...}}, ...}}}.
func ParseBGPSummary(data []byte) (BGPSummary, error) {
	var vrfs map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &vrfs); err != nil {
		return BGPSummary{}, fmt.Errorf("bgp summary is not {vrf: {family: …}} JSON: %w", err)
	}
	var s BGPSummary
	for _, vrf := range slices.Sorted(maps.Keys(vrfs)) {
		s.VRFs = append(s.VRFs, vrf)
		byPeer := map[string]*BGPNeighbor{}
		for _, fam := range slices.Sorted(maps.Keys(vrfs[vrf])) {
			var af struct {
				Peers map[string]summaryPeer `json:"peers"`
			}
			if json.Unmarshal(vrfs[vrf][fam], &af) != nil {
				continue // not a family's object
			}
			for peer, p := range af.Peers {
				n := byPeer[peer]
				if n == nil {
					n = &BGPNeighbor{VRF: vrf, Peer: peer, RemoteAS: strings.Trim(string(p.RemoteAS), `"`), State: p.State, Uptime: p.Uptime}
					byPeer[peer] = n
				}
				n.Received += p.PfxRcd
				n.Families = append(n.Families, fam)
			}
		}
		for _, peer := range slices.Sorted(maps.Keys(byPeer)) {
			s.Neighbors = append(s.Neighbors, *byPeer[peer])
		}
	}
	return s, nil
}

// BGPSummary asks the instance for its BGP neighbours in every VRF.
func (i Instance) BGPSummary(ctx context.Context) (BGPSummary, error) {
	out, err := i.Run(ctx, "show bgp vrf all summary json")
	if err != nil {
		return BGPSummary{}, err
	}
	s, err := ParseBGPSummary([]byte(out))
	if err != nil {
		return BGPSummary{}, fmt.Errorf("%s: %w", i, err)
	}
	return s, nil
}

// RIBEntry is one route to a prefix in one of FRR's routing tables (zebra's
// RIB), as "show ip route … json" gives it.
type RIBEntry struct {
	Prefix    netip.Prefix
	Protocol  string // "bgp", "static", "connected", "kernel", …
	VRF       string // FRR's vrfName: "default", …
	Table     int    // the kernel table zebra installs it in
	Selected  bool   // the best route to the prefix
	Installed bool   // in the kernel (zebra says)
	Distance  int
	Metric    int
	Nexthops  []Nexthop
}

// Nexthop is one next hop of a RIBEntry.
type Nexthop struct {
	IP        string // "" for a directly connected or blackhole route
	Interface string
	Active    bool
	FIB       bool // installed in the kernel
	Blackhole bool
}

// String is one line of evidence: "203.0.113.0/24 bgp selected installed
// (table 254) via 192.0.2.1 dev uplink".
func (e RIBEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Prefix, e.Protocol)
	if e.Selected {
		b.WriteString(" selected")
	} else {
		b.WriteString(" not selected")
	}
	if e.Installed {
		b.WriteString(" installed")
	} else {
		b.WriteString(" not installed")
	}
	fmt.Fprintf(&b, " (vrf %s, table %d, distance %d, metric %d)", e.VRF, e.Table, e.Distance, e.Metric)
	for _, nh := range e.Nexthops {
		switch {
		case nh.Blackhole:
			b.WriteString(" blackhole")
		case nh.IP != "":
			fmt.Fprintf(&b, " via %s", nh.IP)
		}
		if nh.Interface != "" {
			fmt.Fprintf(&b, " dev %s", nh.Interface)
		}
		if !nh.Active {
			b.WriteString(" (inactive)")
		}
	}
	return b.String()
}

type ribJSON struct {
	Prefix    string `json:"prefix"`
	Protocol  string `json:"protocol"`
	VRFName   string `json:"vrfName"`
	Table     int    `json:"table"`
	Selected  bool   `json:"selected"`
	Installed bool   `json:"installed"`
	Distance  int    `json:"distance"`
	Metric    int    `json:"metric"`
	Nexthops  []struct {
		IP        string `json:"ip"`
		Interface string `json:"interfaceName"`
		Active    bool   `json:"active"`
		FIB       bool   `json:"fib"`
		Blackhole bool   `json:"blackhole"`
	} `json:"nexthops"`
}

// ParseRIB reads FRR 8.4's "show ip route [vrf X] [PREFIX] json" (and
// ipv6): {prefix: [entry, …]}. Entries are sorted by prefix, the selected
// one first.
func ParseRIB(data []byte) ([]RIBEntry, error) {
	var m map[string][]ribJSON
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("routes are not {prefix: [route, …]} JSON: %w", err)
	}
	var out []RIBEntry
	for key, entries := range m {
		for _, r := range entries {
			p, err := netip.ParsePrefix(cmp.Or(r.Prefix, key))
			if err != nil {
				return nil, fmt.Errorf("route %q: %w", key, err)
			}
			e := RIBEntry{Prefix: p, Protocol: r.Protocol, VRF: r.VRFName, Table: r.Table, Selected: r.Selected,
				Installed: r.Installed, Distance: r.Distance, Metric: r.Metric}
			for _, nh := range r.Nexthops {
				e.Nexthops = append(e.Nexthops, Nexthop{IP: nh.IP, Interface: nh.Interface, Active: nh.Active, FIB: nh.FIB, Blackhole: nh.Blackhole})
			}
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b RIBEntry) int {
		if c := cmp.Compare(a.Prefix.String(), b.Prefix.String()); c != 0 {
			return c
		}
		switch {
		case a.Selected && !b.Selected:
			return -1
		case b.Selected && !a.Selected:
			return 1
		}
		return cmp.Compare(a.Distance, b.Distance)
	})
	return out, nil
}

// RIB asks the instance for its routes to exactly prefix in vrf ("" or
// "default" = the default VRF): "show ip route [vrf X] PREFIX json", ipv6
// for an IPv6 prefix. No route is an empty answer, not an error; FRR
// answers the same for a VRF it does not have.
func (i Instance) RIB(ctx context.Context, vrf string, prefix netip.Prefix) ([]RIBEntry, error) {
	out, err := i.Run(ctx, ribCommand(vrf, prefix))
	if err != nil {
		return nil, err
	}
	rib, err := ParseRIB([]byte(out))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", i, ribCommand(vrf, prefix), err)
	}
	return rib, nil
}

func ribCommand(vrf string, prefix netip.Prefix) string {
	cmd := "show ip route "
	if prefix.Addr().Is6() {
		cmd = "show ipv6 route "
	}
	if vrf != "" && vrf != DefaultVRF {
		cmd += "vrf " + vrf + " "
	}
	return cmd + prefix.Masked().String() + " json"
}

// DefaultVRF is FRR's name for the default VRF.
const DefaultVRF = "default"

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
