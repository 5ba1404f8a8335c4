package main

import (
	"flag"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/netcheck"
)

func addrList(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestNetCheckFlags(t *testing.T) {
	const timeout, retries = 3 * time.Second, 2
	spec := func(c agent.Check) agent.CheckSpec {
		return agent.CheckSpec{Check: c, Timeout: timeout, Retries: retries}
	}
	tests := []struct {
		name    string
		given   []string
		want    []agent.CheckSpec
		wantErr string
	}{
		{name: "none", given: nil, want: nil},
		{name: "gateway without targets", given: []string{"--check-gateway"}, want: []agent.CheckSpec{spec(netcheck.Gateway{Targets: map[uint32][]netip.Addr{}})}},
		{
			name:  "targets imply the gateway check, merged per VLAN",
			given: []string{"--check-gateway-target", "100=10.100.0.12,fd00:100::12", "--check-gateway-target", "200=10.200.0.12", "--check-gateway-target", "100=10.100.0.13"},
			want: []agent.CheckSpec{spec(netcheck.Gateway{Targets: map[uint32][]netip.Addr{
				100: addrList("10.100.0.12", "fd00:100::12", "10.100.0.13"),
				200: addrList("10.200.0.12"),
			}})},
		},
		{
			name:  "uplinks first, then the gateway, then the peers",
			given: []string{"--check-peer", "10.0.0.5", "--check-peer", "tcp://[fd00::5]:179%red", "--check-gateway", "--check-uplink", "eth0", "--check-uplink", "eth1"},
			want: []agent.CheckSpec{
				spec(netcheck.Uplink{Interface: "eth0"}),
				spec(netcheck.Uplink{Interface: "eth1"}),
				spec(netcheck.Gateway{Targets: map[uint32][]netip.Addr{}}),
				spec(netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5")}),
				spec(netcheck.Peer{TCP: netip.MustParseAddrPort("[fd00::5]:179"), VRF: "red"}),
			},
		},
		{name: "peer in a VRF", given: []string{"--check-peer", "10.0.0.5%red"}, want: []agent.CheckSpec{spec(netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5"), VRF: "red"})}},
		{name: "target without vlan", given: []string{"--check-gateway-target", "10.100.0.12"},
			wantErr: "--check-gateway-target 10.100.0.12: want VLAN=ADDR[,ADDR...]"},
		{name: "target with a bad vlan", given: []string{"--check-gateway-target", "v100=10.100.0.12"},
			wantErr: `--check-gateway-target v100=10.100.0.12: vlan "v100" is not a number 1-4094`},
		{name: "target vlan out of range", given: []string{"--check-gateway-target", "4095=10.0.0.1"},
			wantErr: `--check-gateway-target 4095=10.0.0.1: vlan "4095" is not a number 1-4094`},
		{name: "target that is not an address", given: []string{"--check-gateway-target", "100=10.100.0.12,gw1"},
			wantErr: `--check-gateway-target 100=10.100.0.12,gw1: target "gw1" is not an IP address`},
		{name: "empty target", given: []string{"--check-gateway-target", "100="},
			wantErr: `--check-gateway-target 100=: target "" is not an IP address`},
		{name: "target given twice", given: []string{"--check-gateway-target", "100=10.0.0.1", "--check-gateway-target", "100=10.0.0.1"},
			wantErr: `--check-gateway-target 100=10.0.0.1 100=10.0.0.1: check "gateway: 100=10.0.0.1,10.0.0.1": targets: vlan 100: 10.0.0.1 given twice`},
		{name: "multicast target", given: []string{"--check-gateway-target", "100=224.0.0.1"},
			wantErr: "targets: vlan 100: 224.0.0.1 is not a unicast address"},
		{name: "peer host name", given: []string{"--check-peer", "spine1"},
			wantErr: `--check-peer spine1: "spine1": want an IP address to ping, or tcp://ADDR:PORT`},
		{name: "peer with a bad VRF", given: []string{"--check-peer", "10.0.0.5%Red"},
			wantErr: `--check-peer 10.0.0.5%Red: vrf: "Red" must be lower-case letters`},
		{name: "peer over udp", given: []string{"--check-peer", "udp://10.0.0.5:53"},
			wantErr: `--check-peer udp://10.0.0.5:53: "udp://10.0.0.5:53": unknown scheme "udp"`},
		{name: "empty peer", given: []string{"--check-peer", " "}, wantErr: "--check-peer: empty value"},
		{name: "empty uplink", given: []string{"--check-uplink", ""}, wantErr: "--check-uplink: empty value"},
		{name: "uplink name too long", given: []string{"--check-uplink", "enp0s31f6-uplink0"},
			wantErr: `--check-uplink enp0s31f6-uplink0: check "uplink: enp0s31f6-uplink0": interface name "enp0s31f6-uplink0" is longer than 15 characters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f netCheckFlags
			fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			if err := fs.Parse(tt.given); err != nil {
				t.Fatal(err)
			}
			got, err := f.specs(timeout, retries)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("specs() = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("specs(): %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("specs() =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
}

func TestNetCheckFlags_HelpDocumentsTheSyntax(t *testing.T) {
	var f netCheckFlags
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	f.register(fs)
	for name, want := range map[string][]string{
		"check-gateway":        {"br.v<vlan>", "anycast gateways", "VRF"},
		"check-gateway-target": {"repeatable", "VLAN=ADDR[,ADDR...]", "implies --check-gateway"},
		"check-peer":           {"repeatable", "ADDR%VRF", "tcp://ADDR:PORT[%VRF]", "tcp://[ADDR]:PORT", "IP address"},
		"check-uplink":         {"repeatable", "up", "carrier"},
	} {
		fl := fs.Lookup(name)
		if fl == nil {
			t.Errorf("no flag --%s", name)
			continue
		}
		for _, w := range want {
			if !strings.Contains(fl.Usage, w) {
				t.Errorf("--%s help %q does not mention %q", name, fl.Usage, w)
			}
		}
	}
}

// fileCheck is a --config check as checkSpec embeds the network checks.
type fileCheck struct {
	Name string `json:"name"`
	netCheckFields
}

func TestNetCheckFields(t *testing.T) {
	tests := []struct {
		name    string
		given   string // one YAML list item
		want    []agent.Check
		wantErr string
	}{
		{name: "no network check", given: "{name: other}", want: nil},
		{name: "gateway", given: "{gateway: {}}", want: []agent.Check{netcheck.Gateway{Targets: map[uint32][]netip.Addr{}}}},
		{
			name:  "gateway with targets",
			given: "{name: gw, gateway: {targets: {100: [10.100.0.12, 'fd00:100::12'], '200': [10.200.0.12]}}}",
			want: []agent.Check{netcheck.Gateway{Label: "gw", Targets: map[uint32][]netip.Addr{
				100: addrList("10.100.0.12", "fd00:100::12"), 200: addrList("10.200.0.12"),
			}}},
		},
		{name: "peer", given: "{peer: 10.0.0.5}", want: []agent.Check{netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5")}}},
		{name: "peer with vrf", given: "{peer: 'tcp://10.0.0.5:179', vrf: red}",
			want: []agent.Check{netcheck.Peer{TCP: netip.MustParseAddrPort("10.0.0.5:179"), VRF: "red"}}},
		{name: "peer with %vrf", given: "{name: spine, peer: '10.0.0.5%red'}",
			want: []agent.Check{netcheck.Peer{Label: "spine", Addr: netip.MustParseAddr("10.0.0.5"), VRF: "red"}}},
		{name: "uplink", given: "{uplink: eth0}", want: []agent.Check{netcheck.Uplink{Interface: "eth0"}}},
		{name: "two kinds are returned for the caller to refuse", given: "{uplink: eth0, peer: 10.0.0.5}",
			want: []agent.Check{netcheck.Uplink{Interface: "eth0"}, netcheck.Peer{Addr: netip.MustParseAddr("10.0.0.5")}}},
		{name: "vrf twice", given: "{peer: '10.0.0.5%red', vrf: blue}", wantErr: `vrf: "blue" given twice, in peer "10.0.0.5%red" and in vrf`},
		{name: "vrf without a peer", given: "{uplink: eth0, vrf: red}", wantErr: "vrf: only for a peer check"},
		{name: "bad peer", given: "{peer: spine1}", wantErr: `peer: "spine1": want an IP address`},
		{name: "bad vlan", given: "{gateway: {targets: {v100: [10.0.0.1]}}}", wantErr: `gateway.targets: vlan "v100" is not a number 1-4094`},
		{name: "vlan without targets", given: "{gateway: {targets: {100: []}}}", wantErr: "gateway.targets: vlan 100 has no target"},
		{name: "bad target", given: "{gateway: {targets: {100: [10.0.0.1, gw1]}}}", wantErr: `gateway.targets[100][1]: target "gw1" is not an IP address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var file struct {
				Checks []fileCheck `json:"checks"`
			}
			if err := yaml.UnmarshalStrict([]byte("checks:\n- "+tt.given+"\n"), &file); err != nil {
				t.Fatalf("parse: %v", err)
			}
			c := file.Checks[0]
			got, err := c.checks(c.Name)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("checks() = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("checks(): %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("checks() =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
}

func TestNetCheckFields_UnknownFieldsAreErrors(t *testing.T) {
	for _, given := range []string{
		"{gateway: {target: {100: [10.0.0.1]}}}",
		"{peer: 10.0.0.5, vfr: red}",
	} {
		var file struct {
			Checks []fileCheck `json:"checks"`
		}
		err := yaml.UnmarshalStrict([]byte("checks:\n- "+given+"\n"), &file)
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: err = %v, want an unknown field", given, err)
		}
	}
}
