package frr

import (
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
)

// The testdata files are FRR 8.4.4's answers, recorded from instances in
// network namespaces on this machine kind (Debian's frr 8.4.4-1.1~deb12u2):
//
//	bgp-summary-vrf-all-mixed.json        an Established IPv4 and IPv6 neighbour, an Active one, an Idle one in vrf blue
//	bgp-summary-vrf-all-established.json  the peer's side: prefixes received over IPv4 and IPv6
//	bgp-summary-vrf-all-shutdown.json     a neighbour shut down by the config ("Idle (Admin)") and an Active one
//	bgp-summary-vrf-all-none.json         bgpd without "router bgp"
//	bgp-summary-vrf-all-nopeers.json      "router bgp" without neighbours
//	ip-route-*.json, ipv6-route-*.json    "show ip[v6] route [vrf X] [PREFIX] json"
func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseBGPSummary(t *testing.T) {
	est := func(vrf, peer, as string, received int, up string, fams ...string) BGPNeighbor {
		return BGPNeighbor{VRF: vrf, Peer: peer, RemoteAS: as, State: "Established", Received: received, Families: fams, Uptime: up}
	}
	down := func(vrf, peer, as, state string) BGPNeighbor {
		return BGPNeighbor{VRF: vrf, Peer: peer, RemoteAS: as, State: state, Families: []string{"ipv4Unicast"}, Uptime: "never"}
	}
	tests := []struct {
		file string
		want BGPSummary
	}{
		{"bgp-summary-vrf-all-mixed.json", BGPSummary{VRFs: []string{"blue", "default"}, Neighbors: []BGPNeighbor{
			down("blue", "10.77.0.2", "65077", "Idle"),
			est("default", "10.9.0.2", "65002", 0, "00:00:03", "ipv4Unicast"),
			down("default", "10.9.0.99", "65099", "Active"),
			est("default", "fd00:9::2", "65002", 0, "00:00:03", "ipv4Unicast", "ipv6Unicast"),
		}}},
		{"bgp-summary-vrf-all-established.json", BGPSummary{VRFs: []string{"default"}, Neighbors: []BGPNeighbor{
			est("default", "10.9.0.1", "65001", 1, "00:00:04", "ipv4Unicast"),
			// an IPv6 session carrying IPv4 too: its counts add up
			est("default", "fd00:9::1", "65001", 2, "00:00:04", "ipv4Unicast", "ipv6Unicast"),
		}}},
		{"bgp-summary-vrf-all-shutdown.json", BGPSummary{VRFs: []string{"default"}, Neighbors: []BGPNeighbor{
			down("default", "10.1.1.1", "65010", "Idle (Admin)"),
			down("default", "10.1.1.2", "65010", "Active"),
		}}},
		{"bgp-summary-vrf-all-none.json", BGPSummary{}},
		{"bgp-summary-vrf-all-nopeers.json", BGPSummary{VRFs: []string{"default"}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := ParseBGPSummary(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := ParseBGPSummary([]byte("% Unknown command: show bgp vrf all summary json")); err == nil {
		t.Error("a vtysh complaint parsed as a summary")
	}
}

func TestBGPCheck_Judge(t *testing.T) {
	tests := []struct {
		name        string
		file        string
		minPrefixes int
		wantErr     error
		wantErrText string   // in the error
		wantOut     []string // lines of the output
	}{
		{
			name: "a neighbour not established fails naming it and its state", file: "bgp-summary-vrf-all-mixed.json",
			wantErr: ErrNotEstablished, wantErrText: "bgp neighbour 10.77.0.2 in vrf blue is Idle: not established (and 1 more failures, see the output)",
			wantOut: []string{
				"bgp neighbour 10.9.0.99 in vrf default is Active: not established",
				"vrf default: 10.9.0.99 (AS 65099) Active, never established",
				"vrf default: fd00:9::2 (AS 65002) Established, 0 prefixes received (ipv4Unicast, ipv6Unicast), up 00:00:03",
			},
		},
		{
			name: "all established passes", file: "bgp-summary-vrf-all-established.json",
			wantOut: []string{"vrf default: 10.9.0.1 (AS 65001) Established, 1 prefix received (ipv4Unicast), up 00:00:04"},
		},
		{
			name: "each neighbour needs its minimum of prefixes", file: "bgp-summary-vrf-all-established.json", minPrefixes: 2,
			wantErr: ErrFewPrefixes, wantErrText: "bgp neighbour 10.9.0.1 in vrf default sent 1 prefix, want at least 2: too few prefixes",
		},
		{name: "counts over families meet the minimum", file: "bgp-summary-vrf-all-established.json", minPrefixes: 1},
		{
			name: "a neighbour shut down by the config is listed, not checked", file: "bgp-summary-vrf-all-shutdown.json",
			wantErr: ErrNotEstablished, wantErrText: "bgp neighbour 10.1.1.2 in vrf default is Active: not established",
			wantOut: []string{"vrf default: 10.1.1.1 (AS 65010) Idle (Admin), never established: shut down by the config, not checked"},
		},
		{
			name: "no BGP at all fails", file: "bgp-summary-vrf-all-none.json",
			wantErr: ErrNoNeighbors, wantErrText: "no BGP neighbour in any VRF to check (no BGP instance)",
		},
		{
			name: "BGP without neighbours fails", file: "bgp-summary-vrf-all-nopeers.json",
			wantErr: ErrNoNeighbors, wantErrText: "no BGP neighbour in any VRF to check (BGP in vrf default)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseBGPSummary(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			out, err := BGP{MinPrefixes: tt.minPrefixes}.judge(s)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("err = %v, want nil\n%s", err, out)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("err = %v, want %v\n%s", err, tt.wantErr, out)
			case tt.wantErrText != "" && (err == nil || err.Error() != tt.wantErrText):
				t.Errorf("err = %v\nwant %s", err, tt.wantErrText)
			}
			lines := strings.Split(out, "\n")
			for _, w := range tt.wantOut {
				if !contains(lines, w) {
					t.Errorf("output lacks the line %q:\n%s", w, out)
				}
			}
		})
	}
}

func contains(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

func TestParseRIB(t *testing.T) {
	tests := []struct {
		file string
		want []string // RIBEntry.String()
	}{
		{"ip-route-prefix-bgp.json", []string{"203.0.113.0/24 bgp selected installed (vrf default, table 254, distance 20, metric 0) via 10.9.0.1 dev vb"}},
		{"ip-route-prefix-static.json", []string{"203.0.113.0/24 static selected installed (vrf default, table 254, distance 1, metric 0) blackhole"}},
		{"ipv6-route-prefix-bgp.json", []string{"2001:db8:1::/48 bgp selected installed (vrf default, table 254, distance 20, metric 0) via fe80::605f:34ff:fe6d:e6f3 dev vb"}},
		{"ip-route-table.json", []string{
			"10.9.0.0/24 connected selected installed (vrf default, table 254, distance 0, metric 0) dev vb",
			"203.0.113.0/24 bgp selected installed (vrf default, table 254, distance 20, metric 0) via 10.9.0.1 dev vb",
		}},
		{"ip-route-prefix-absent.json", nil},
		{"ip-route-vrf-inactive.json", nil},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			rib, err := ParseRIB(readTestdata(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range rib {
				got = append(got, e.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	if _, err := ParseRIB([]byte(`{"nonsense":[{"protocol":"bgp"}]}`)); err == nil {
		t.Error("a route without a prefix parsed")
	}
}

func TestRIBCommand(t *testing.T) {
	tests := []struct {
		vrf, prefix, want string
	}{
		{"", "203.0.113.0/24", "show ip route 203.0.113.0/24 json"},
		{"default", "203.0.113.0/24", "show ip route 203.0.113.0/24 json"},
		{"blue", "203.0.113.0/24", "show ip route vrf blue 203.0.113.0/24 json"},
		{"blue", "2001:db8::/48", "show ipv6 route vrf blue 2001:db8::/48 json"},
	}
	for _, tt := range tests {
		if got := ribCommand(tt.vrf, netip.MustParsePrefix(tt.prefix)); got != tt.want {
			t.Errorf("ribCommand(%q, %s) = %q, want %q", tt.vrf, tt.prefix, got, tt.want)
		}
	}
}

func TestParseRoute(t *testing.T) {
	tests := []struct {
		in       string
		wantName string
		wantErr  string
	}{
		{in: "203.0.113.0/24", wantName: "route: 203.0.113.0/24"},
		{in: "203.0.113.0/24%default", wantName: "route: 203.0.113.0/24"},
		{in: "2001:db8::/48%blue", wantName: "route: 2001:db8::/48%blue"},
		{in: "203.0.113.1/24", wantErr: "route 203.0.113.1/24 has host bits set: write 203.0.113.0/24"},
		{in: "203.0.113.0", wantErr: `route "203.0.113.0": want PREFIX[%VRF]`},
		{in: "203.0.113.0/24%a b", wantErr: `vrf "a b" is not a VRF name`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			c, err := ParseRoute(tt.in, Instance{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Name() != tt.wantName {
				t.Errorf("name %q, want %q", c.Name(), tt.wantName)
			}
		})
	}
	if err := (BGP{MinPrefixes: -1}).Validate(); err == nil {
		t.Error("a negative minimum of prefixes validated")
	}
	if got := (BGP{MinPrefixes: 3}).Name(); got != "bgp: at least 3 prefixes per neighbour" {
		t.Errorf("BGP name %q", got)
	}
}
