package frr_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicehq/sluice/internal/testkit/frrtest"
	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
	"github.com/sluicehq/sluice/services/agent/frr"
)

// TestFRR_NetnsVRF_ChecksLookInTheVRFsNamespace runs the checks against
// FRR's netns VRF backend (zebra -n), which the host kernel supports where
// it has no VRF devices: node n2's VRF is the network namespace vrfNS,
// which has a veth to n1, and n2's BGP in that VRF learns n1's prefix.
// The BGP check sees the session in the VRF, and the route check finds
// the prefix in FRR's table of the VRF and in the main table of the VRF's
// namespace, not in n2's own.
func TestFRR_NetnsVRF_ChecksLookInTheVRFsNamespace(t *testing.T) {
	frrtest.Require(t)
	hostnettest.RequireNetAdmin(t)
	n1Name, n2Name, vrf := hostnettest.UniqueName("n1"), hostnettest.UniqueName("n2"), hostnettest.UniqueName("vrf")
	n1NS := hostnettest.NewNamespace(t, n1Name)
	n2NS := hostnettest.NewNamespace(t, n2Name)
	vrfNS := hostnettest.NewNamespace(t, vrf)

	// n1:v1 10.7.0.1/30 <-> vrf:v2 10.7.0.2/30
	h1, hv := hostnettest.Handle(t, n1NS), hostnettest.Handle(t, vrfNS)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "v1"
	if err := h1.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "v2", PeerNamespace: netlink.NsFd(int(vrfNS))}); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		h    *netlink.Handle
		dev  string
		addr string
	}{{h1, "v1", "10.7.0.1/30"}, {hv, "v2", "10.7.0.2/30"}} {
		link, err := side.h.LinkByName(side.dev)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := netlink.ParseAddr(side.addr)
		if err := side.h.AddrAdd(link, a); err != nil {
			t.Fatal(err)
		}
		if err := side.h.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}

	frrtest.Start(t, n1Name, frrtest.Options{Config: `router bgp 65001
 no bgp ebgp-requires-policy
 neighbor 10.7.0.2 remote-as 65002
 neighbor 10.7.0.2 timers connect 1
 address-family ipv4 unicast
  redistribute static
 exit-address-family
exit
ip route 203.0.113.0/24 Null0
`})
	n2 := frrtest.Start(t, n2Name, frrtest.Options{ZebraArgs: []string{"--vrfwnetns"}, Config: `router bgp 65002 vrf ` + vrf + `
 no bgp ebgp-requires-policy
 neighbor 10.7.0.1 remote-as 65001
 neighbor 10.7.0.1 timers connect 1
exit
`})

	out, err, took := runCheck(t, n2NS, frr.BGP{FRR: n2.Instance, MinPrefixes: 1}, 30*time.Second)
	if err != nil {
		t.Fatalf("bgp check: %v\n%s", err, out)
	}
	if !strings.Contains(out, "vrf "+vrf+": 10.7.0.1 (AS 65001) Established, 1 prefix received") {
		t.Errorf("bgp check output does not show the session in vrf %s:\n%s", vrf, out)
	}
	t.Logf("bgp check in the netns vrf passed in %s:\n%s", took.Round(time.Millisecond), out)

	c, err := frr.ParseRoute("203.0.113.0/24%"+vrf, n2.Instance)
	if err != nil {
		t.Fatal(err)
	}
	out, err, _ = runCheck(t, n2NS, c, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v\n%s", c.Name(), err, out)
	}
	for _, want := range []string{
		"FRR: 203.0.113.0/24 bgp selected installed (vrf " + vrf,
		"kernel main table of network namespace " + vrf + ": 203.0.113.0/24 via 10.7.0.1 dev v2 proto bgp",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: output lacks %q:\n%s", c.Name(), want, out)
		}
	}
	t.Logf("%s:\n%s", c.Name(), out)

	// In the default VRF (n2's own namespace) the prefix is nowhere.
	out, err, _ = runCheck(t, n2NS, frr.Route{FRR: n2.Instance, Prefix: c.Prefix}, time.Second)
	if err == nil || !strings.Contains(out, "203.0.113.0/24 is not in the kernel's main table") {
		t.Errorf("route check in the default vrf: err = %v\n%s", err, out)
	}
}
