package netcheck_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/netcheck"
)

func TestParsePeer(t *testing.T) {
	tests := []struct {
		name     string
		given    string
		want     netcheck.Peer
		wantName string
		wantErr  string // "" = valid
	}{
		{name: "IPv4 address", given: "10.0.0.5", want: netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5")}, wantName: "peer: 10.0.0.5"},
		{name: "IPv6 address", given: "fd00::5", want: netcheck.Peer{Addr: netip.MustParseAddr("fd00::5")}, wantName: "peer: fd00::5"},
		{name: "address in a VRF", given: "10.0.0.5%red", want: netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5"), VRF: "red"}, wantName: "peer: 10.0.0.5%red"},
		{name: "IPv6 address in a VRF", given: "fd00::5%blue-2", want: netcheck.Peer{Addr: netip.MustParseAddr("fd00::5"), VRF: "blue-2"}},
		{name: "tcp", given: "tcp://10.0.0.5:179", want: netcheck.Peer{TCP: netip.MustParseAddrPort("10.0.0.5:179")}, wantName: "peer: tcp://10.0.0.5:179"},
		{name: "tcp IPv6 in a VRF", given: "tcp://[fd00::5]:179%red", want: netcheck.Peer{TCP: netip.MustParseAddrPort("[fd00::5]:179"), VRF: "red"}, wantName: "peer: tcp://[fd00::5]:179%red"},
		{name: "host name", given: "spine1", wantErr: `"spine1": want an IP address to ping, or tcp://ADDR:PORT`},
		{name: "tcp host name", given: "tcp://spine1:179", wantErr: `"tcp://spine1:179": want tcp://ADDR:PORT with an IP address (IPv6 in brackets)`},
		{name: "tcp without port", given: "tcp://10.0.0.5", wantErr: "want tcp://ADDR:PORT"},
		{name: "tcp port 0", given: "tcp://10.0.0.5:0", wantErr: "tcp 10.0.0.5:0: port 0"},
		{name: "other scheme", given: "udp://10.0.0.5:53", wantErr: `unknown scheme "udp", want tcp://ADDR:PORT or an address to ping`},
		{name: "empty VRF", given: "10.0.0.5%", wantErr: `"10.0.0.5%": empty VRF after %`},
		{name: "VRF that is not a name", given: "10.0.0.5%Red_1", wantErr: `vrf: "Red_1" must be lower-case letters, digits and inner '-'`},
		{name: "zone inside brackets", given: "tcp://[fe80::1%eth0]:179", wantErr: "an address with a zone is not supported"},
		{name: "link-local", given: "fe80::1%red", wantErr: "fe80::1 is link-local: it needs an interface"},
		{name: "multicast", given: "224.0.0.5", wantErr: "224.0.0.5 is not a unicast address"},
		{name: "unspecified", given: "::", wantErr: ":: is not a unicast address"},
		{name: "IPv4-mapped", given: "::ffff:10.0.0.5", wantErr: "write an IPv4 address as such (10.0.0.5)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := netcheck.ParsePeer(tt.given)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePeer(%q) = %+v, %v; want an error containing %q", tt.given, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePeer(%q): %v", tt.given, err)
			}
			if got != tt.want {
				t.Errorf("ParsePeer(%q) = %+v, want %+v", tt.given, got, tt.want)
			}
			if got.String() != tt.given {
				t.Errorf("String() = %q, want it to read back as %q", got.String(), tt.given)
			}
			if tt.wantName != "" && got.Name() != tt.wantName {
				t.Errorf("Name() = %q, want %q", got.Name(), tt.wantName)
			}
		})
	}
}

func TestValidate_NamesTheCheckAndTheProblem(t *testing.T) {
	target := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	tests := []struct {
		name    string
		given   agent.Check
		wantErr string // "" = valid
	}{
		{name: "gateway without targets", given: netcheck.Gateway{}},
		{name: "gateway with targets", given: netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: target("10.100.0.12", "fd00:100::12")}}},
		{name: "gateway vlan 0", given: netcheck.Gateway{Targets: map[uint32][]netip.Addr{0: target("10.0.0.1")}},
			wantErr: `check "gateway: 0=10.0.0.1": targets: vlan 0 is not 1-4094`},
		{name: "gateway vlan 4095", given: netcheck.Gateway{Targets: map[uint32][]netip.Addr{4095: target("10.0.0.1")}},
			wantErr: "targets: vlan 4095 is not 1-4094"},
		{name: "gateway vlan without targets", given: netcheck.Gateway{Label: "gw", Targets: map[uint32][]netip.Addr{100: nil}},
			wantErr: `check "gw": targets: vlan 100 has no target`},
		{name: "gateway target twice", given: netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: target("10.0.0.1", "10.0.0.1")}},
			wantErr: "targets: vlan 100: 10.0.0.1 given twice"},
		{name: "gateway multicast target", given: netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: target("ff02::1")}},
			wantErr: "targets: vlan 100: ff02::1 is not a unicast address"},
		{name: "gateway negative wait", given: netcheck.Gateway{Wait: -time.Second}, wantErr: "wait -1s is negative"},
		{name: "peer", given: netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5")}},
		{name: "peer with neither", given: netcheck.Peer{Label: "spine"},
			wantErr: `check "spine": set exactly one of an address to ping and a TCP address`},
		{name: "peer with both", given: netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5"), TCP: netip.MustParseAddrPort("10.0.0.5:179")},
			wantErr: "set exactly one of an address to ping and a TCP address"},
		{name: "uplink", given: netcheck.Uplink{Interface: "eth0"}},
		{name: "uplink without name", given: netcheck.Uplink{}, wantErr: `check "uplink: ": interface name is empty`},
		{name: "uplink name too long", given: netcheck.Uplink{Interface: "enp0s31f6-uplink0"},
			wantErr: `interface name "enp0s31f6-uplink0" is longer than 15 characters`},
		{name: "uplink name with a slash", given: netcheck.Uplink{Interface: "eth0/1"}, wantErr: `interface name "eth0/1" has a '/', ':' or a space`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := agent.CheckSpec{Check: tt.given}.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
