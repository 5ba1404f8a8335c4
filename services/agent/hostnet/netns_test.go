package hostnet_test

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// pingWait is how long a ping that should work waits for its reply.
// Margin: the ping returns at the first reply; 30s covers neighbour
// discovery and a loaded machine many times over.
const pingWait = 30 * time.Second

// node is one node namespace of a test fabric with its applier.
type node struct {
	hostnettest.Node
	host    hostnet.Host
	applier *hostnet.Applier
	h       *netlink.Handle
}

// nodeAddr is node i's (from 1) own address in the network with vlan:
// 10.<vlan>.0.1<i>/24, e.g. 10.10.0.11/24 for node 1 in VLAN 10, except in
// VLAN 20, where it is IPv6: fd00:20::1<i>/64.
func nodeAddr(vlan uint32, i int) netip.Prefix {
	if vlan == 20 {
		return netip.MustParsePrefix(fmt.Sprintf("fd00:20::1%d/64", i))
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(vlan), 0, byte(10 + i)}), 24)
}

// nodeIP is the address of nodeAddr.
func nodeIP(vlan uint32, i int) netip.Addr { return nodeAddr(vlan, i).Addr() }

// gateways are the anycast gateways of the network with vlan:
// 10.<vlan>.0.1/24 and fd00:<vlan>::1/64.
func gateways(vlan uint32) []string {
	return []string{fmt.Sprintf("10.%d.0.1/24", vlan), fmt.Sprintf("fd00:%d::1/64", vlan)}
}

// newNodes builds a fabric of n node namespaces, each with an applier in
// vrfs mode, the VTEP address of its uplink, every node's VTEP as flood
// peer (its own is skipped) and node addresses in VLANs 10, 20 and 30.
func newNodes(t *testing.T, n int, vrfs string) []*node {
	t.Helper()
	hostnettest.RequireNetAdmin(t)
	f := hostnettest.NewFabric(t, n)
	var peers []netip.Addr
	for _, fn := range f.Nodes {
		peers = append(peers, fn.VTEP)
	}
	var nodes []*node
	for i, fn := range f.Nodes {
		h := hostnet.Host{
			Uplink: hostnettest.UplinkName, VTEPAddress: fn.VTEP, FloodPeers: peers, VRFs: vrfs,
			NodeAddresses: map[uint32]netip.Prefix{10: nodeAddr(10, i+1), 20: nodeAddr(20, i+1), 30: nodeAddr(30, i+1)},
		}
		a, err := hostnet.NewAt(fn.NS, h)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &node{Node: fn, host: h, applier: a, h: hostnettest.Handle(t, fn.NS)})
	}
	return nodes
}

// apply applies cfg on n and fails the test on an error.
func (n *node) apply(t *testing.T, cfg *sluicev1.DesiredConfig) {
	t.Helper()
	if err := n.applier.Apply(context.Background(), cfg); err != nil {
		t.Fatalf("%s: apply: %v", n.Name, err)
	}
}

// links returns the names of all links in n's namespace, sorted.
func (n *node) links(t *testing.T) []string {
	t.Helper()
	list, err := n.h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range list {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	return names
}

// ping pings from n's address src to dst and fails the test without reply.
func (n *node) ping(t *testing.T, src, dst netip.Addr) {
	t.Helper()
	if err := hostnettest.Ping(n.NS, src, dst, pingWait); err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
}

// noPing fails the test if a ping from n's address src to dst is answered.
// Margin: callers ping the same path with success first, so neighbours are
// known and a path still open answers the first of the ~7 echoes within
// milliseconds; 1.5s of silence shows it is closed.
func (n *node) noPing(t *testing.T, src, dst netip.Addr) {
	t.Helper()
	if err := hostnettest.Ping(n.NS, src, dst, 1500*time.Millisecond); err == nil {
		t.Fatalf("%s: ping %s from %s got a reply, want none", n.Name, dst, src)
	}
}

// owned returns what n's applier reads as owned.
func (n *node) owned(t *testing.T) hostnet.Desired {
	t.Helper()
	d, err := n.applier.Owned()
	if err != nil {
		t.Fatalf("%s: read owned links: %v", n.Name, err)
	}
	return d
}

// requireOwned fails the test unless n's owned links are what cfg renders
// to on n's host.
func (n *node) requireOwned(t *testing.T, cfg *sluicev1.DesiredConfig) {
	t.Helper()
	want, err := hostnet.Render(cfg.GetConfig(), n.host)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.owned(t); !reflect.DeepEqual(got.Links, want.Links) {
		t.Fatalf("%s: owned links:\n%s", n.Name, linkDiff(got.Links, want.Links))
	}
}

// veth creates a veth pair in n's namespace, name up and peer up, and
// returns name's link.
func (n *node) veth(t *testing.T, name, peer string) netlink.Link {
	t.Helper()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	if err := n.h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: peer}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{name, peer} {
		l, err := n.h.LinkByName(name)
		if err == nil {
			err = n.h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// link returns n's link name.
func (n *node) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	return l
}
