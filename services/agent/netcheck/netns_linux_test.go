package netcheck_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
)

// testNS is a named network namespace of one test, removed when the test
// ends however it ends.
type testNS struct {
	name string
	h    netns.NsHandle
	nl   *netlink.Handle // configures the namespace from any thread
}

// newNS creates a namespace named slt-<pid>-<n>-<role>, with lo up,
// removed when the test ends (hostnettest).
func newNS(t *testing.T, role string) *testNS {
	t.Helper()
	hostnettest.RequireNetAdmin(t)
	name := hostnettest.UniqueName(role)
	h := hostnettest.NewNamespace(t, name)
	return &testNS{name: name, h: h, nl: hostnettest.Handle(t, h)}
}

// run calls fn on a thread inside ns: the checks look at the namespace of
// the thread that runs them.
func (ns *testNS) run(t *testing.T, fn func()) {
	t.Helper()
	if err := hostnettest.RunIn(ns.h, func() error { fn(); return nil }); err != nil {
		t.Fatalf("%s: %v", ns.name, err)
	}
}

func (ns *testNS) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := ns.nl.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: link %s: %v", ns.name, name, err)
	}
	return l
}

func (ns *testNS) up(t *testing.T, name string) {
	t.Helper()
	if err := ns.nl.LinkSetUp(ns.link(t, name)); err != nil {
		t.Fatalf("%s: set %s up: %v", ns.name, name, err)
	}
}

func (ns *testNS) down(t *testing.T, name string) {
	t.Helper()
	if err := ns.nl.LinkSetDown(ns.link(t, name)); err != nil {
		t.Fatalf("%s: set %s down: %v", ns.name, name, err)
	}
}

// addr returns prefix as a netlink address, IPv6 without duplicate
// address detection so that it is usable at once.
func addr(t *testing.T, prefix string) *netlink.Addr {
	t.Helper()
	p := netip.MustParsePrefix(prefix)
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

func (ns *testNS) addAddr(t *testing.T, link, prefix string) {
	t.Helper()
	if err := ns.nl.AddrAdd(ns.link(t, link), addr(t, prefix)); err != nil {
		t.Fatalf("%s: add %s to %s: %v", ns.name, prefix, link, err)
	}
}

func (ns *testNS) delAddr(t *testing.T, link, prefix string) {
	t.Helper()
	if err := ns.nl.AddrDel(ns.link(t, link), addr(t, prefix)); err != nil {
		t.Fatalf("%s: remove %s from %s: %v", ns.name, prefix, link, err)
	}
}

// addLink adds l to ns.
func (ns *testNS) addLink(t *testing.T, l netlink.Link) {
	t.Helper()
	if err := ns.nl.LinkAdd(l); err != nil {
		t.Fatalf("%s: add %s %s: %v", ns.name, l.Type(), l.Attrs().Name, err)
	}
}

// addVeth adds the veth pair name–peerName, peerName in the namespace peer.
func (ns *testNS) addVeth(t *testing.T, name, peerName string, peer *testNS) {
	t.Helper()
	ns.addLink(t, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peerName, PeerNamespace: netlink.NsFd(peer.h)})
}

// lan is the network of the tests: the namespace node (where the checks
// run) has the bridge br.v100 of VLAN 100 with the node's own addresses .11
// and ::11 and the anycast gateways 10.100.0.1/24 and fd00:100::1/64; a
// veth pair joins the bridge to the namespace peer, which has .12 and ::12
// on its end, vp.
type lan struct {
	node, peer *testNS
}

const (
	bridge     = "br.v100"
	gwDevice   = "gw.v100"
	gw4, gw6   = "10.100.0.1/24", "fd00:100::1/64"
	node4      = "10.100.0.11/24"
	node6      = "fd00:100::11/64"
	peer4      = "10.100.0.12/24"
	peer6      = "fd00:100::12/64"
	peerLink   = "vp"
	bridgePort = "vn"
)

// lanLayout is how a LAN is built.
type lanLayout struct {
	// macvlan puts the gateways where the applier puts them: on the
	// macvlan gw.v100 on the bridge, without a prefix route of their own
	// (the node address routes the prefix). Else they are on the bridge.
	macvlan bool
	// vrf puts the bridge (and gw.v100) in the VRF device vrf-tenant-a
	// (table 10), skipping the test where the kernel has no VRFs.
	vrf bool
}

// vrfDevice is the device of VRF tenant-a.
const vrfDevice = "vrf-tenant-a"

// newLAN builds the LAN with the gateways on the bridge itself.
func newLAN(t *testing.T) *lan { return buildLAN(t, lanLayout{}) }

func buildLAN(t *testing.T, layout lanLayout) *lan {
	t.Helper()
	l := &lan{node: newNS(t, "node"), peer: newNS(t, "peer")}
	snoop := false // no MLD querier here: flood, so that neighbour discovery works at once
	l.node.addLink(t, &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridge}, MulticastSnooping: &snoop})
	l.node.addVeth(t, bridgePort, peerLink, l.peer)
	l.node.enslave(t, bridgePort, bridge)
	gwLink := bridge
	if layout.macvlan {
		gwLink = gwDevice
		l.node.addLink(t, &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: gwDevice, ParentIndex: l.node.link(t, bridge).Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE})
	}
	// Into the VRF before the addresses go on: a link that changes VRF
	// is cycled, which drops its IPv6 addresses.
	if layout.vrf {
		l.node.addVRF(t, vrfDevice, 10)
		l.node.enslave(t, bridge, vrfDevice)
		if layout.macvlan {
			l.node.enslave(t, gwDevice, vrfDevice)
		}
	}
	l.node.up(t, bridgePort)
	l.node.up(t, bridge)
	if layout.macvlan {
		l.node.up(t, gwDevice)
	}
	l.peer.up(t, peerLink)
	l.node.waitOperUp(t, bridgePort, bridge)
	if layout.macvlan {
		l.node.waitOperUp(t, gwDevice)
	}
	l.peer.waitOperUp(t, peerLink)

	// The addresses go on links that are up: the kernel then joins their
	// IPv6 solicited-node groups at once, not up to a second after the
	// link comes up (rtr_solicit_delay). The node's own addresses first:
	// deleting the primary IPv4 address of a subnet deletes its
	// secondaries with it, and a test that removes a gateway must keep the
	// node address.
	l.node.addAddr(t, bridge, node4)
	l.node.addAddr(t, bridge, node6)
	for _, g := range []string{gw4, gw6} {
		a := addr(t, g)
		if layout.macvlan {
			a.Flags |= unix.IFA_F_NOPREFIXROUTE
		}
		if err := l.node.nl.AddrAdd(l.node.link(t, gwLink), a); err != nil {
			t.Fatalf("add %s to %s: %v", g, gwLink, err)
		}
	}
	l.peer.addAddr(t, peerLink, peer4)
	l.peer.addAddr(t, peerLink, peer6)
	l.node.waitSolicitedNode(t, bridge, node6)
	l.node.waitSolicitedNode(t, gwLink, gw6)
	l.peer.waitSolicitedNode(t, peerLink, peer6)
	return l
}

// waitSolicitedNode waits until link has joined the solicited-node
// multicast group of prefix's address: until then it ignores neighbour
// solicitations for the address, and the address does not answer.
func (ns *testNS) waitSolicitedNode(t *testing.T, link, prefix string) {
	t.Helper()
	a := netip.MustParsePrefix(prefix).Addr().As16()
	group := fmt.Sprintf("ff0200000000000000000001ff%02x%02x%02x", a[13], a[14], a[15])
	deadline := time.Now().Add(5 * time.Second)
	for {
		var joined bool
		ns.run(t, func() {
			// thread-self: /proc/self/net is the namespace of the
			// process's main thread, not of this one.
			b, err := os.ReadFile("/proc/thread-self/net/igmp6")
			if err != nil {
				t.Errorf("%s: read igmp6: %v", ns.name, err)
				return
			}
			for line := range strings.SplitSeq(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) >= 3 && f[1] == link && f[2] == group {
					joined = true
				}
			}
		})
		if joined {
			return
		}
		if t.Failed() || time.Now().After(deadline) {
			t.Fatalf("%s: %s has not joined %s, the solicited-node group of %s, after 5s", ns.name, link, group, prefix)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitOperUp waits until links have the operstate up. The kernel sets it
// a moment after the carrier (linkwatch, up to a second later), and only
// then gives the link a working queue: until then it drops what it sends.
func (ns *testNS) waitOperUp(t *testing.T, links ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, name := range links {
		for ns.link(t, name).Attrs().OperState != netlink.OperUp {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s is not operationally up after 5s (operstate %s)", ns.name, name, ns.link(t, name).Attrs().OperState)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// addVRF adds the VRF device name bound to table, skipping t where the
// kernel has no VRF support.
func (ns *testNS) addVRF(t *testing.T, name string, table uint32) {
	t.Helper()
	err := ns.nl.LinkAdd(&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: name}, Table: table})
	if errors.Is(err, unix.EOPNOTSUPP) {
		hostnettest.RequireKernelVRFs(t, err) // skips (only the bridge-bound path is tested here), or fails under make test-kernel
	}
	if err != nil {
		t.Fatalf("%s: add vrf %s: %v", ns.name, name, err)
	}
	ns.up(t, name)
}

// enslave puts link under master.
func (ns *testNS) enslave(t *testing.T, link, master string) {
	t.Helper()
	if err := ns.nl.LinkSetMaster(ns.link(t, link), ns.link(t, master)); err != nil {
		t.Fatalf("%s: put %s under %s: %v", ns.name, link, master, err)
	}
}

// runCheck runs c inside ns with the applied config cfg, bounded by
// timeout.
func runCheck(t *testing.T, ns *testNS, c agent.Check, cfg *sluicev1.DesiredConfig, timeout time.Duration) (string, error) {
	t.Helper()
	var out string
	var err error
	ns.run(t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out, err = c.Run(ctx, agent.CheckEnv{Node: "n1", Config: cfg})
	})
	t.Logf("check %q: err %v; output:\n%s", c.Name(), err, out)
	return out, err
}

// wantResult fails t unless err is nil (wantKind nil) or matches wantKind
// and contains wantErr, and out contains every one of wantOut.
func wantResult(t *testing.T, out string, err, wantKind error, wantErr string, wantOut ...string) {
	t.Helper()
	switch {
	case wantKind == nil && err != nil:
		t.Errorf("err = %v, want none", err)
	case wantKind != nil && !errors.Is(err, wantKind):
		t.Errorf("err = %v, want one matching %v", err, wantKind)
	case wantKind != nil && !strings.Contains(err.Error(), wantErr):
		t.Errorf("err = %q, want it to contain %q", err, wantErr)
	}
	for _, w := range wantOut {
		if !strings.Contains(out, w) {
			t.Errorf("output does not contain %q:\n%s", w, out)
		}
	}
}
