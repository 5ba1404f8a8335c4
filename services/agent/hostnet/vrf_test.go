package hostnet_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// The tests of this file need VRF devices (CONFIG_NET_VRF): this machine
// kind's kernel has none, so they skip here, saying so, and run in Debian's
// kernel under qemu with make test-kernel, where a skip is a failure.

// kernelVRFNodes is newNodes in vrfs: kernel, where the kernel has VRFs.
func kernelVRFNodes(t *testing.T, n int) []*node {
	t.Helper()
	hostnettest.RequireNetAdmin(t)
	hostnettest.RequireKernelVRFs(t, hostnet.ProbeVRF())
	return newNodes(t, n, hostnet.VRFsKernel)
}

// pingIn pings from src to dst inside the VRF device dev of n.
func (n *node) pingIn(t *testing.T, dev string, src, dst netip.Addr) {
	t.Helper()
	if err := hostnettest.PingDev(n.NS, dev, src, dst, pingWait); err != nil {
		t.Fatalf("%s: inside %s: %v", n.Name, dev, err)
	}
}

// noPingIn fails t if a ping from src to dst inside dev is answered.
func (n *node) noPingIn(t *testing.T, dev string, src, dst netip.Addr) {
	t.Helper()
	if err := hostnettest.PingDev(n.NS, dev, src, dst, 1500*time.Millisecond); err == nil {
		t.Fatalf("%s: inside %s: ping %s from %s got a reply, want none: the VRFs are not isolated", n.Name, dev, dst, src)
	}
}

// routesIn returns the destinations of n's IPv4 routes in kernel table id.
func (n *node) routesIn(t *testing.T, id int) []string {
	t.Helper()
	rs, err := n.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: id}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("%s: routes of table %d: %v", n.Name, id, err)
	}
	var dsts []string
	for _, r := range rs {
		if r.Dst != nil {
			dsts = append(dsts, r.Dst.String())
		}
	}
	slices.Sort(dsts)
	return dsts
}

// vrfTable returns the kernel table of n's VRF device name.
func (n *node) vrfTable(t *testing.T, name string) int {
	t.Helper()
	vrf, ok := n.link(t, name).(*netlink.Vrf)
	if !ok {
		t.Fatalf("%s: %s is a %s, want a vrf", n.Name, name, n.link(t, name).Type())
	}
	return int(vrf.Table)
}

// Two tenants, each a VLAN in a VRF of its own: a node reaches the other
// node's address in its own tenant's network and not the other tenant's,
// and each network's route is in its VRF's table, not the main one. With
// vrfs: off both would be in the main table and the cross-tenant ping
// would be answered.
func TestApplier_KernelVRFs_TenantsAreIsolated(t *testing.T) {
	nodes := kernelVRFNodes(t, 2)
	cfg := desired(l2("red-net", 10, 100, 0, "red", gateways(10)...), l2("blue-net", 30, 300, 0, "blue", gateways(30)...))
	for _, n := range nodes {
		n.apply(t, cfg)
		n.requireOwned(t, cfg)
	}
	n1 := nodes[0]
	n1.pingIn(t, "vrf-red", nodeIP(10, 1), nodeIP(10, 2))
	n1.pingIn(t, "vrf-blue", nodeIP(30, 1), nodeIP(30, 2))
	n1.noPingIn(t, "vrf-red", nodeIP(10, 1), nodeIP(30, 2))
	n1.noPingIn(t, "vrf-blue", nodeIP(30, 1), nodeIP(10, 2))

	red, blue := n1.vrfTable(t, "vrf-red"), n1.vrfTable(t, "vrf-blue")
	if red == blue || red == unix.RT_TABLE_MAIN || blue == unix.RT_TABLE_MAIN {
		t.Fatalf("vrf-red on table %d, vrf-blue on %d: want two tables of their own", red, blue)
	}
	if got := n1.routesIn(t, red); !slices.Contains(got, "10.10.0.0/24") || slices.Contains(got, "10.30.0.0/24") {
		t.Fatalf("table %d (vrf-red): %v, want 10.10.0.0/24 and not 10.30.0.0/24", red, got)
	}
	if got := n1.routesIn(t, blue); !slices.Contains(got, "10.30.0.0/24") || slices.Contains(got, "10.10.0.0/24") {
		t.Fatalf("table %d (vrf-blue): %v, want 10.30.0.0/24 and not 10.10.0.0/24", blue, got)
	}
	if got := n1.routesIn(t, unix.RT_TABLE_MAIN); slices.Contains(got, "10.10.0.0/24") || slices.Contains(got, "10.30.0.0/24") {
		t.Fatalf("main table: %v, want neither tenant's network in it", got)
	}
}

// A RoutingTable intent of a VRF's name gives that VRF its table; one of
// another name is a table device of its own (tbl.<id>), on its table.
func TestApplier_KernelVRFs_RoutingTables(t *testing.T) {
	n := kernelVRFNodes(t, 1)[0]
	cfg := desired(l2("ten", 10, 100, 0, "red", gateways(10)...), table("red", 700), table("other", 710))
	n.apply(t, cfg)
	n.requireOwned(t, cfg)
	if got := n.vrfTable(t, "vrf-red"); got != 700 {
		t.Fatalf("vrf-red on table %d, want 700 (its RoutingTable)", got)
	}
	if got := n.vrfTable(t, "tbl.710"); got != 710 {
		t.Fatalf("tbl.710 on table %d, want 710", got)
	}
	if got := n.routesIn(t, 700); !slices.Contains(got, "10.10.0.0/24") {
		t.Fatalf("table 700: %v, want VLAN 10's network", got)
	}
	n.apply(t, cfg)
	if w := n.applier.LastWrites(); w != 0 {
		t.Fatalf("same config again: %d writes, want 0", w)
	}
}

// An apply that fails part way puts back the VRFs it changed and removes
// the ones it made: the node is on its last config, VRFs and all.
func TestApplier_KernelVRFs_FailedApply_PutsTheVRFsBack(t *testing.T) {
	nodes := kernelVRFNodes(t, 2)
	good := desired(l2("ten", 10, 100, 0, "red", gateways(10)...))
	for _, n := range nodes {
		n.apply(t, good)
	}
	n1 := nodes[0]
	badHost := n1.host
	badHost.Uplink = "missing0"
	bad, err := hostnet.NewAt(n1.NS, badHost)
	if err != nil {
		t.Fatal(err)
	}
	// VLAN 10 moves to VRF green (new), VLAN 20 comes in VRF blue (new):
	// the VXLAN devices cannot be made without the uplink.
	err = bad.Apply(context.Background(), desired(l2("ten", 10, 100, 0, "green", gateways(10)...), l2("twenty", 20, 200, 0, "blue", gateways(20)...)))
	if err == nil || !strings.Contains(err.Error(), "uplink missing0") {
		t.Fatalf("apply with a missing uplink: %v, want an error naming the uplink", err)
	}
	if bad.LastWrites() == 0 {
		t.Fatal("the failed apply wrote nothing: the test does not test the undo")
	}
	n1.requireOwned(t, good)
	for _, gone := range []string{"vrf-green", "vrf-blue", "br.v20"} {
		if slices.Contains(n1.links(t), gone) {
			t.Fatalf("%s is still there after the undo: links %v", gone, n1.links(t))
		}
	}
	if got := n1.link(t, "br.v10").Attrs().MasterIndex; got != n1.link(t, "vrf-red").Attrs().Index {
		t.Fatal("br.v10 is not back in vrf-red")
	}
	n1.pingIn(t, "vrf-red", nodeIP(10, 1), nodeIP(10, 2))
}

// A VRF device sluice does not own already holds the table a VRF of the
// config would take: the apply is refused before it writes anything, as
// two VRFs on one table share their routes (the tenants would not be
// isolated).
func TestApplier_KernelVRFs_TableOfAForeignVRF_Refused(t *testing.T) {
	n := kernelVRFNodes(t, 1)[0]
	if err := n.h.LinkAdd(&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: "mgmt"}, Table: 720}); err != nil {
		t.Fatal(err)
	}
	err := n.applier.Apply(context.Background(), desired(l2("ten", 10, 100, 0, "red", gateways(10)...), table("red", 720)))
	if err == nil || !strings.Contains(err.Error(), "mgmt") || !strings.Contains(err.Error(), "720") {
		t.Fatalf("apply onto the table of foreign VRF mgmt: %v, want it refused naming mgmt and table 720", err)
	}
	if w := n.applier.LastWrites(); w != 0 {
		t.Fatalf("the refused apply wrote %d times, want 0", w)
	}
	if slices.Contains(n.links(t), "vrf-red") {
		t.Fatal("vrf-red was made")
	}
}
