package hostnet_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// The tests below run the applier in node namespaces of a test fabric
// (newNodes) with vrfs: off unless they say otherwise: this suite's kernel
// may lack CONFIG_NET_VRF.

func TestApplier_ThreeNodes_PingAcrossTheOverlay(t *testing.T) {
	nodes := newNodes(t, 3, hostnet.VRFsOff)
	// Node 3 names only its uplink: the kernel picks the VXLAN source
	// address, and its own address must not be a flood peer.
	n3 := nodes[2]
	n3.host.VTEPAddress, n3.host.FloodPeers = netip.Addr{}, []netip.Addr{nodes[0].VTEP, nodes[1].VTEP}
	var err error
	if n3.applier, err = hostnet.NewAt(n3.NS, n3.host); err != nil {
		t.Fatal(err)
	}
	cfg := desired(l2("ten", 10, 100, 0, "red", gateways(10)...), l2("twenty", 20, 200, 0, "red", gateways(20)...))
	for _, n := range nodes {
		n.apply(t, cfg)
		n.requireOwned(t, cfg)
	}

	nodes[0].ping(t, nodeIP(10, 1), nodeIP(10, 2))
	nodes[0].ping(t, nodeIP(10, 1), nodeIP(10, 3))
	nodes[2].ping(t, nodeIP(20, 3), nodeIP(20, 1)) // IPv6

	// A workload behind node 1's bridge reaches the other nodes over the
	// overlay, and sees its gateway at the anycast MAC.
	host := hostnettest.NewNamespace(t, hostnettest.UniqueName("host"))
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "h1"
	if err := nodes[0].h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(host))}); err != nil {
		t.Fatal(err)
	}
	h1 := nodes[0].link(t, "h1")
	if err := nodes[0].h.LinkSetMaster(h1, nodes[0].link(t, "br.v10")); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].h.LinkSetUp(h1); err != nil {
		t.Fatal(err)
	}
	hh := hostnettest.Handle(t, host)
	eth0, err := hh.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := hh.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 10, 0, 100), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := hh.LinkSetUp(eth0); err != nil {
		t.Fatal(err)
	}
	workload := &node{Node: hostnettest.Node{Name: "workload", NS: host}}
	workload.ping(t, netip.MustParseAddr("10.10.0.100"), nodeIP(10, 3))
	workload.ping(t, netip.MustParseAddr("10.10.0.100"), netip.MustParseAddr("10.10.0.1"))
	neighs, err := hh.NeighList(eth0.Attrs().Index, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(neighs, func(n netlink.Neigh) bool { return n.IP.Equal(net.IPv4(10, 10, 0, 1)) })
	if i < 0 || neighs[i].HardwareAddr.String() != hostnet.DefaultAnycastMAC {
		t.Fatalf("workload's neighbours %v: want the gateway 10.10.0.1 at %s", neighs, hostnet.DefaultAnycastMAC)
	}
}

func TestApplier_ConfigChange_ConvergesAndLeavesForeignLinksAlone(t *testing.T) {
	nodes := newNodes(t, 2, hostnet.VRFsOff)
	before := desired(l2("ten", 10, 100, 0, "", gateways(10)...), l2("twenty", 20, 200, 0, "", gateways(20)...))
	for _, n := range nodes {
		n.apply(t, before)
	}
	n1 := nodes[0]
	// Links sluice does not own: a bridge named like an owned one but
	// without the alias, and a veth enslaved to an owned bridge.
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "br.v999"
	if err := n1.h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
		t.Fatal(err)
	}
	port := n1.veth(t, "fx0", "fx1")
	if err := n1.h.LinkSetMaster(port, n1.link(t, "br.v10")); err != nil {
		t.Fatal(err)
	}
	bridgeMAC := n1.link(t, "br.v10").Attrs().HardwareAddr.String()

	// VLAN 10's MTU grows, VLAN 20 goes, VLAN 30 comes.
	after := desired(l2("ten", 10, 100, 9000, "", gateways(10)...), l2("thirty", 30, 300, 0, "", gateways(30)...))
	for _, n := range nodes {
		n.apply(t, after)
		n.requireOwned(t, after)
	}
	want := []string{"br.v10", "br.v30", "br.v999", "fx0", "fx1", "gw.v10", "gw.v30", "lo", "sl.v10", "sl.v30", "uplink"}
	if got := n1.links(t); !slices.Equal(got, want) {
		t.Fatalf("links after the change: %v, want %v", got, want)
	}
	if l := n1.link(t, "br.v999"); l.Attrs().Alias != "" {
		t.Errorf("foreign br.v999 got alias %q", l.Attrs().Alias)
	}
	if got := n1.link(t, "fx0").Attrs().MasterIndex; got != n1.link(t, "br.v10").Attrs().Index {
		t.Errorf("foreign port fx0 left br.v10 (master index %d)", got)
	}
	if got := n1.link(t, "br.v10").Attrs().HardwareAddr.String(); got != bridgeMAC {
		t.Errorf("br.v10's MAC changed from %s to %s when a port joined", bridgeMAC, got)
	}
	for _, name := range []string{"br.v10", "gw.v10", "sl.v10"} {
		if mtu := n1.link(t, name).Attrs().MTU; mtu != 9000 {
			t.Errorf("%s has MTU %d, want 9000", name, mtu)
		}
	}
	n1.ping(t, nodeIP(10, 1), nodeIP(10, 2))
	n1.ping(t, nodeIP(30, 1), nodeIP(30, 2))
}

func TestApplier_SameConfigTwice_SecondWritesNothing(t *testing.T) {
	n := newNodes(t, 1, hostnet.VRFsOff)[0]
	first := desired(l2("ten", 10, 100, 0, "", gateways(10)...), l2("twenty", 20, 200, 0, "", gateways(20)...))
	second := desired(l2("ten", 10, 100, 9000, "", gateways(10)[:1]...), l2("thirty", 30, 300, 0, "", nil...))
	n.apply(t, first)
	w := n.applier.LastWrites()
	if w == 0 {
		t.Fatal("first apply wrote nothing")
	}
	t.Logf("first apply: %d writes", w)
	n.apply(t, first)
	if w := n.applier.LastWrites(); w != 0 {
		t.Fatalf("same config again: %d writes, want 0", w)
	}
	n.apply(t, second)
	n.apply(t, second)
	if w := n.applier.LastWrites(); w != 0 {
		t.Fatalf("changed config again: %d writes, want 0", w)
	}
}

func TestApplier_WrongVNI_PingFails_UntilTheRightConfigIsBack(t *testing.T) {
	nodes := newNodes(t, 2, hostnet.VRFsOff)
	right := desired(l2("ten", 10, 100, 0, "", gateways(10)...))
	wrong := desired(l2("ten", 10, 101, 0, "", gateways(10)...))
	for _, n := range nodes {
		n.apply(t, right)
	}
	nodes[0].ping(t, nodeIP(10, 1), nodeIP(10, 2))

	nodes[1].apply(t, wrong)
	nodes[0].noPing(t, nodeIP(10, 1), nodeIP(10, 2))

	nodes[1].apply(t, right)
	nodes[0].ping(t, nodeIP(10, 1), nodeIP(10, 2))
}

func TestApplier_FailedApply_UndoesTheAttempt(t *testing.T) {
	nodes := newNodes(t, 2, hostnet.VRFsOff)
	good := desired(l2("ten", 10, 100, 0, "", gateways(10)...))
	for _, n := range nodes {
		n.apply(t, good)
	}
	n1 := nodes[0]

	// The same node with an uplink that does not exist: the attempt
	// deletes sl.v10 (its source device changes), changes br.v10's MTU and
	// creates br.v20 and gw.v20 before creating a VXLAN device fails.
	badHost := n1.host
	badHost.Uplink = "missing0"
	bad, err := hostnet.NewAt(n1.NS, badHost)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Apply(context.Background(), desired(l2("ten", 10, 100, 9000, "", gateways(10)...), l2("twenty", 20, 200, 0, "", gateways(20)...)))
	if err == nil || !strings.Contains(err.Error(), "create vxlan sl.v10") || !strings.Contains(err.Error(), "uplink missing0") {
		t.Fatalf("apply with a missing uplink: %v, want an error naming sl.v10 and the uplink", err)
	}
	if bad.LastWrites() == 0 {
		t.Fatal("the failed apply wrote nothing: the test does not test the undo")
	}
	n1.requireOwned(t, good)
	if got, want := n1.links(t), []string{"br.v10", "gw.v10", "lo", "sl.v10", "uplink"}; !slices.Equal(got, want) {
		t.Fatalf("links after the failed apply: %v, want %v", got, want)
	}
	n1.ping(t, nodeIP(10, 1), nodeIP(10, 2))
}

func TestApplier_NameTakenByForeignLink_FailsWithoutWriting(t *testing.T) {
	n := newNodes(t, 1, hostnet.VRFsOff)[0]
	cfg := desired(l2("ten", 10, 100, 0, "", gateways(10)...))
	n.apply(t, cfg)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "br.v40"
	if err := n.h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
		t.Fatal(err)
	}

	err := n.applier.Apply(context.Background(), desired(l2("ten", 10, 100, 0, "", gateways(10)...), l2("forty", 40, 400, 0, "", nil...)))
	if !errors.Is(err, hostnet.ErrNameTaken) || !strings.Contains(err.Error(), "br.v40") {
		t.Fatalf("apply: %v, want ErrNameTaken naming br.v40", err)
	}
	if w := n.applier.LastWrites(); w != 0 {
		t.Fatalf("%d writes, want 0", w)
	}
	n.requireOwned(t, cfg)
	if l := n.link(t, "br.v40"); l.Attrs().Alias != "" {
		t.Fatalf("foreign br.v40 got alias %q", l.Attrs().Alias)
	}
}

func TestApplier_CancelledContext_WritesNothing(t *testing.T) {
	n := newNodes(t, 1, hostnet.VRFsOff)[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := n.applier.Apply(ctx, desired(l2("ten", 10, 100, 0, "", gateways(10)...)))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("apply: %v, want context.Canceled", err)
	}
	if len(n.owned(t).Links) != 0 || n.applier.LastWrites() != 0 {
		t.Fatal("a cancelled apply changed the namespace")
	}
}

func TestApplier_RoutingDaemonFile_WrittenOnChangeOnly(t *testing.T) {
	n := newNodes(t, 1, hostnet.VRFsOff)[0]
	path := filepath.Join(t.TempDir(), "frr", "sluice.json")
	n.host.RoutingDaemonFile = path
	a, err := hostnet.NewAt(n.NS, n.host)
	if err != nil {
		t.Fatal(err)
	}
	cfg := desired(l2("ten", 10, 100, 0, "red", gateways(10)...), route("leak", "red", 10, "65000:1", nil, nil))
	if err := a.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want, err := hostnet.Render(cfg.GetConfig(), n.host)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want.Routing.Marshal()) {
		t.Fatalf("routing daemon file:\n%s\nwant:\n%s", got, want.Routing.Marshal())
	}
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	again, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(first, again) {
		t.Fatal("the same config rewrote the routing daemon file")
	}
}

func TestApplier_KernelVRFs(t *testing.T) {
	hostnettest.RequireNetAdmin(t)
	hostnettest.RequireKernelVRFs(t, hostnet.ProbeVRF())
	nodes := newNodes(t, 2, hostnet.VRFsKernel)
	cfg := desired(l2("ten", 10, 100, 0, "red", gateways(10)...), l2("thirty", 30, 300, 0, "blue", gateways(30)...),
		table("blue", 500))
	for _, n := range nodes {
		n.apply(t, cfg)
		n.requireOwned(t, cfg)
	}
	n1 := nodes[0]
	if vrf, ok := n1.link(t, "vrf-blue").(*netlink.Vrf); !ok || vrf.Table != 500 {
		t.Fatalf("vrf-blue: %+v, want a VRF on table 500", n1.link(t, "vrf-blue"))
	}
	if got := n1.link(t, "br.v10").Attrs().MasterIndex; got != n1.link(t, "vrf-red").Attrs().Index {
		t.Fatalf("br.v10 is not in vrf-red")
	}
	if err := hostnettest.PingDev(n1.NS, "vrf-red", nodeIP(10, 1), nodeIP(10, 2), pingWait); err != nil {
		t.Fatal(err)
	}

	// VLAN 10 moves to VRF blue; VRF red goes.
	moved := desired(l2("ten", 10, 100, 0, "blue", gateways(10)...), l2("thirty", 30, 300, 0, "blue", gateways(30)...),
		table("blue", 500))
	for _, n := range nodes {
		n.apply(t, moved)
		n.requireOwned(t, moved)
		n.apply(t, moved)
		if w := n.applier.LastWrites(); w != 0 {
			t.Fatalf("%s: same config again: %d writes, want 0", n.Name, w)
		}
	}
	if err := hostnettest.PingDev(n1.NS, "vrf-blue", nodeIP(10, 1), nodeIP(10, 2), pingWait); err != nil {
		t.Fatal(err)
	}
}

func TestApplier_KernelVRFsWithoutKernelSupport_SaysWhatToDo(t *testing.T) {
	hostnettest.RequireNetAdmin(t)
	if err := hostnet.ProbeVRF(); !errors.Is(err, hostnet.ErrNoVRFSupport) {
		// make test-kernel leaves this test out (-test.skip): there every
		// skip is a failure.
		t.Skipf("the kernel has VRF support (ProbeVRF: %v): TestApplier_KernelVRFs covers it", err)
	}
	n := newNodes(t, 1, hostnet.VRFsKernel)[0]
	noVRF := desired(l2("thirty", 30, 300, 0, "", gateways(30)...))
	n.apply(t, noVRF)

	err := n.applier.Apply(context.Background(), desired(l2("ten", 10, 100, 0, "red", gateways(10)...)))
	if !errors.Is(err, hostnet.ErrNoVRFSupport) || !strings.Contains(err.Error(), "CONFIG_NET_VRF") ||
		!strings.Contains(err.Error(), "vrfs: off") || !strings.Contains(err.Error(), "vrf-red") {
		t.Fatalf("apply with a VRF: %v, want ErrNoVRFSupport naming vrf-red, CONFIG_NET_VRF and vrfs: off", err)
	}
	n.requireOwned(t, noVRF)
}

func TestProbeVRF_LeavesNoTrace(t *testing.T) {
	hostnettest.RequireNetAdmin(t)
	err := hostnet.ProbeVRF()
	if err != nil && !errors.Is(err, hostnet.ErrNoVRFSupport) {
		t.Fatalf("ProbeVRF: %v", err)
	}
	t.Logf("ProbeVRF: %v", err)
	if _, err := netlink.LinkByName("probe"); err == nil {
		t.Fatal("ProbeVRF left a link named probe in this namespace")
	}
}
