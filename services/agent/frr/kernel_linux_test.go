package frr

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/internal/testkit/hostnettest"
)

// TestKernelRoutes looks routes up in a real kernel: an IPv6 route and an
// IPv4 default route in the main table of the namespace it runs in, a
// route in the main table of the namespace named as the VRF (FRR's netns
// VRFs), and a VRF that is neither a device nor a namespace.
func TestKernelRoutes(t *testing.T) {
	hostnettest.RequireNetAdmin(t)
	node, vrfName := hostnettest.UniqueName("node"), hostnettest.UniqueName("vrf")
	nodeNS, vrfNS := hostnettest.NewNamespace(t, node), hostnettest.NewNamespace(t, vrfName)
	addRoute := func(h *netlink.Handle, dev, prefix string) {
		t.Helper()
		link, err := h.LinkByName(dev)
		if err != nil {
			attrs := netlink.NewLinkAttrs()
			attrs.Name = dev
			// A veth pair: this kernel has no dummy devices.
			if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: dev + "p"}); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{dev + "p", dev} {
				if link, err = h.LinkByName(name); err != nil {
					t.Fatal(err)
				}
				if err := h.LinkSetUp(link); err != nil {
					t.Fatal(err)
				}
			}
		}
		_, dst, _ := net.ParseCIDR(prefix)
		if err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Protocol: unix.RTPROT_BGP}); err != nil {
			t.Fatalf("route %s: %v", prefix, err)
		}
	}
	nh := hostnettest.Handle(t, nodeNS)
	addRoute(nh, "d0", "2001:db8:5::/48")
	addRoute(nh, "d0", "0.0.0.0/0")
	addRoute(hostnettest.Handle(t, vrfNS), "d1", "203.0.113.0/24")

	tests := []struct {
		vrf, prefix string
		wantWhere   string
		wantRoute   string // "" = none
		wantErr     string
	}{
		{vrf: "", prefix: "2001:db8:5::/48", wantWhere: "main table", wantRoute: "2001:db8:5::/48 dev d0 proto bgp metric 1024"},
		{vrf: "default", prefix: "0.0.0.0/0", wantWhere: "main table", wantRoute: "0.0.0.0/0 dev d0 proto bgp"},
		{vrf: "", prefix: "2001:db8:5::/64", wantWhere: "main table"}, // exact prefixes only
		{vrf: "", prefix: "203.0.113.0/24", wantWhere: "main table"},
		{vrf: vrfName, prefix: "203.0.113.0/24", wantWhere: "main table of network namespace " + vrfName, wantRoute: "203.0.113.0/24 dev d1 proto bgp"},
		{vrf: "d0", prefix: "203.0.113.0/24", wantErr: "device d0 is a veth, not a VRF"},
		{vrf: "nosuchvrf", prefix: "203.0.113.0/24", wantErr: "no VRF device nosuchvrf in the kernel, nor a network namespace nosuchvrf"},
	}
	for _, tt := range tests {
		t.Run(tt.vrf+"/"+tt.prefix, func(t *testing.T) {
			var where string
			var routes []string
			var err error
			if rerr := hostnettest.RunIn(nodeNS, func() error {
				where, routes, err = kernelRoutes(tt.vrf, netip.MustParsePrefix(tt.prefix))
				return nil
			}); rerr != nil {
				t.Fatal(rerr)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if where != tt.wantWhere {
				t.Errorf("where = %q, want %q", where, tt.wantWhere)
			}
			var want []string
			if tt.wantRoute != "" {
				want = []string{tt.wantRoute}
			}
			if strings.Join(routes, "|") != strings.Join(want, "|") {
				t.Errorf("routes = %q, want %q", routes, want)
			}
		})
	}
}
