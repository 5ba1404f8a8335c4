package netcheck_test

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/services/agent/netcheck"
)

// listen opens a TCP listener in ns on addr and returns its address; the
// kernel completes connections to it without an Accept.
func listen(t *testing.T, ns *testNS, addr string) netip.AddrPort {
	t.Helper()
	ln := listener(t, ns, addr)
	t.Cleanup(func() { _ = ln.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// closedPort returns an address in ns on which nothing listens.
func closedPort(t *testing.T, ns *testNS, addr string) netip.AddrPort {
	t.Helper()
	ln := listener(t, ns, addr)
	ap := netip.MustParseAddrPort(ln.Addr().String())
	_ = ln.Close()
	return ap
}

// listener opens a TCP listener in ns on addr, failing the test if it cannot.
func listener(t *testing.T, ns *testNS, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	ns.run(t, func() {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			t.Errorf("listen on %s in %s: %v", addr, ns.name, err)
		}
	})
	if ln == nil {
		t.FailNow()
	}
	return ln
}

func TestPeer(t *testing.T) {
	l := newLAN(t)
	open4, open6 := listen(t, l.peer, "10.100.0.12:0"), listen(t, l.peer, "[fd00:100::12]:0")
	closed := closedPort(t, l.peer, "10.100.0.12:0")
	tests := []struct {
		name     string
		given    netcheck.Peer
		wantKind error // nil = healthy
		wantErr  string
		wantOut  string
	}{
		{name: "ping an IPv4 peer", given: netcheck.Peer{Addr: netip.MustParseAddr("10.100.0.12")}, wantOut: "10.100.0.12: reply in"},
		{name: "ping an IPv6 peer", given: netcheck.Peer{Addr: netip.MustParseAddr("fd00:100::12")}, wantOut: "fd00:100::12: reply in"},
		{name: "ping a silent address", given: netcheck.Peer{Addr: netip.MustParseAddr("10.100.0.99"), Wait: wait},
			wantKind: netcheck.ErrNoReply, wantErr: "10.100.0.99: no reply within 300ms"},
		{name: "ping where there is no route", given: netcheck.Peer{Addr: netip.MustParseAddr("192.0.2.1"), Wait: wait},
			wantKind: netcheck.ErrUnreachable, wantErr: "192.0.2.1: cannot send an echo: sendto: network is unreachable"},
		{name: "connect to a listener", given: netcheck.Peer{TCP: open4}, wantOut: "connected to " + open4.String() + " from 10.100.0.1"},
		{name: "connect to an IPv6 listener", given: netcheck.Peer{TCP: open6}, wantOut: "connected to " + open6.String()},
		{name: "connect to a closed port", given: netcheck.Peer{TCP: closed},
			wantKind: netcheck.ErrUnreachable, wantErr: closed.String() + " refused the connection: the host answered, but nothing listens on port"},
		{name: "ping in a VRF without its device", given: netcheck.Peer{Addr: netip.MustParseAddr("10.100.0.12"), VRF: "red"},
			wantKind: netcheck.ErrLinkMissing, wantErr: "vrf red: device vrf-red does not exist"},
		{name: "connect in a VRF without its device", given: netcheck.Peer{TCP: open4, VRF: "red"},
			wantKind: netcheck.ErrLinkMissing, wantErr: "vrf red: device vrf-red does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runCheck(t, l.node, tt.given, nil, 5*time.Second)
			if tt.wantKind != nil {
				wantResult(t, out, err, tt.wantKind, tt.wantErr, tt.wantErr)
				return
			}
			wantResult(t, out, err, nil, "", tt.wantOut)
		})
	}
}

func TestPeer_InsideAVRF(t *testing.T) {
	l := buildLAN(t, lanLayout{vrf: true})
	ap := listen(t, l.peer, "10.100.0.12:0")
	for _, c := range []netcheck.Peer{
		{Addr: netip.MustParseAddr("10.100.0.12"), VRF: "tenant-a"},
		{Addr: netip.MustParseAddr("fd00:100::12"), VRF: "tenant-a"},
		{TCP: ap, VRF: "tenant-a"},
	} {
		out, err := runCheck(t, l.node, c, nil, 5*time.Second)
		wantResult(t, out, err, nil, "", " in vrf tenant-a (vrf-tenant-a)")
	}
}

func TestPeer_UnreachableReportedByARouter_FailsAtOnce(t *testing.T) {
	l := newLAN(t)
	// peer routes for the node, and has no route to 10.200.0.0/24 and
	// fd00:200::/64: it answers with an ICMP error.
	l.peer.run(t, func() {
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1\n"), 0o644); err != nil {
				t.Errorf("enable forwarding in %s: %v", l.peer.name, err)
			}
		}
	})
	for _, dst := range []string{"10.200.0.0/24", "fd00:200::/64"} {
		p := netip.MustParsePrefix(dst)
		ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := l.peer.nl.RouteAdd(&netlink.Route{Dst: ipn, Type: unix.RTN_UNREACHABLE}); err != nil {
			t.Fatalf("peer: unreachable route %s: %v", dst, err)
		}
		via := "10.100.0.12"
		if p.Addr().Is6() {
			via = "fd00:100::12"
		}
		if err := l.node.nl.RouteAdd(&netlink.Route{Dst: ipn, Gw: net.ParseIP(via), LinkIndex: l.node.link(t, bridge).Attrs().Index}); err != nil {
			t.Fatalf("node: route %s via %s: %v", dst, via, err)
		}
	}
	tests := []struct {
		given   netcheck.Peer
		wantErr string
	}{
		{given: netcheck.Peer{Addr: netip.MustParseAddr("10.200.0.5"), Wait: 5 * time.Second}, wantErr: "10.200.0.5: host unreachable (reported by 10.100.0.12)"},
		{given: netcheck.Peer{Addr: netip.MustParseAddr("fd00:200::5"), Wait: 5 * time.Second}, wantErr: "fd00:200::5: no route to destination (reported by fd00:100::12)"},
	}
	for _, tt := range tests {
		start := time.Now()
		out, err := runCheck(t, l.node, tt.given, nil, 10*time.Second)
		wantResult(t, out, err, netcheck.ErrUnreachable, tt.wantErr)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s took %s: an ICMP error should end the wait", tt.given.Name(), took)
		}
	}
}
