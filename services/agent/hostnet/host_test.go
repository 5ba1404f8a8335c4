package hostnet_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/services/agent/hostnet"
)

func TestHost_Validate(t *testing.T) {
	vtep := netip.MustParseAddr("192.0.2.1")
	tests := []struct {
		name    string
		given   hostnet.Host
		wantErr string // "" = valid; else the text the error starts with after the sentinel
	}{
		{name: "uplink only", given: hostnet.Host{Uplink: "eth0"}},
		{name: "vtep address only", given: hostnet.Host{VTEPAddress: vtep}},
		{name: "everything", given: hostnet.Host{
			Uplink: "eth0", VTEPAddress: vtep, VXLANPort: 8472, TableOffset: 1000, VRFTableBase: 20000,
			AnycastMAC: "02:00:00:aa:bb:cc", FloodPeers: []netip.Addr{vtep, netip.MustParseAddr("192.0.2.2")},
			NodeAddresses: map[uint32]netip.Prefix{10: netip.MustParsePrefix("10.10.0.11/24"), 20: netip.MustParsePrefix("fd00:20::11/64")},
			VRFs:          hostnet.VRFsOff, RoutingDaemonFile: "/run/sluice/routing.json",
		}},
		{name: "no uplink nor vtep address", given: hostnet.Host{}, wantErr: "uplink: one of uplink and vtepAddress is required"},
		{name: "uplink too long", given: hostnet.Host{Uplink: "a-very-long-uplink0"}, wantErr: "uplink:"},
		{name: "multicast vtep", given: hostnet.Host{VTEPAddress: netip.MustParseAddr("239.1.1.1")}, wantErr: "vtepAddress:"},
		{name: "table base below 256", given: hostnet.Host{Uplink: "eth0", VRFTableBase: 100}, wantErr: "vrfTableBase:"},
		{name: "table base overflows", given: hostnet.Host{Uplink: "eth0", VRFTableBase: 4294967000}, wantErr: "vrfTableBase:"},
		{name: "anycast MAC not a MAC", given: hostnet.Host{Uplink: "eth0", AnycastMAC: "02:53"}, wantErr: "anycastMAC:"},
		{name: "anycast MAC multicast", given: hostnet.Host{Uplink: "eth0", AnycastMAC: "03:00:00:00:00:01"}, wantErr: "anycastMAC: 03:00:00:00:00:01 is a multicast address"},
		{name: "anycast MAC globally administered", given: hostnet.Host{Uplink: "eth0", AnycastMAC: "00:53:4c:00:00:01"}, wantErr: "anycastMAC: 00:53:4c:00:00:01 is not locally administered"},
		{name: "flood peer twice", given: hostnet.Host{Uplink: "eth0", FloodPeers: []netip.Addr{vtep, vtep}}, wantErr: "floodPeers[1]: 192.0.2.1 is listed twice"},
		{name: "flood peer of another family", given: hostnet.Host{VTEPAddress: vtep, FloodPeers: []netip.Addr{netip.MustParseAddr("2001:db8::2")}}, wantErr: "floodPeers[0]:"},
		{name: "flood peer unspecified", given: hostnet.Host{Uplink: "eth0", FloodPeers: []netip.Addr{netip.IPv4Unspecified()}}, wantErr: "floodPeers[0]:"},
		{name: "node address VLAN out of range", given: hostnet.Host{Uplink: "eth0", NodeAddresses: map[uint32]netip.Prefix{5000: netip.MustParsePrefix("10.0.0.1/24")}}, wantErr: "nodeAddresses[5000]:"},
		{name: "node address is a network address", given: hostnet.Host{Uplink: "eth0", NodeAddresses: map[uint32]netip.Prefix{10: netip.MustParsePrefix("10.10.0.0/24")}}, wantErr: "nodeAddresses[10]:"},
		{name: "unknown vrfs mode", given: hostnet.Host{Uplink: "eth0", VRFs: "on"}, wantErr: `vrfs: "on" is not "kernel" or "off"`},
		{name: "relative routing daemon file", given: hostnet.Host{Uplink: "eth0", RoutingDaemonFile: "routing.json"}, wantErr: "routingDaemonFile:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.given.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, hostnet.ErrInvalidHost) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalidHost", err)
			}
			if want := hostnet.ErrInvalidHost.Error() + ": " + tt.wantErr; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Validate() = %q, want it to start with %q", err, want)
			}
		})
	}
}

func TestHost_Validate_ReportsEveryField(t *testing.T) {
	err := hostnet.Host{VRFs: "x", AnycastMAC: "nope"}.Validate()
	for _, field := range []string{"uplink:", "anycastMAC:", "vrfs:"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %q, want it to name %s", err, field)
		}
	}
}
